use lock_runtime::distributed_lock;

#[distributed_lock(name = "a")]
struct NotAFn;

fn main() {
    let _ = NotAFn;
}
