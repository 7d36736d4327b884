use lock_runtime::distributed_lock;

#[distributed_lock(key = "a")]
struct NotAFn;

fn main() {
    let _ = NotAFn;
}
