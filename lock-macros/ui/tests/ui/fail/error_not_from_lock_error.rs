use lock_runtime::distributed_lock;

#[derive(Debug)]
struct MyError;

#[distributed_lock(name = "a")]
async fn wrong_error() -> Result<(), MyError> {
    Ok(())
}

fn main() {}
