//! `impl Trait` arguments (and an `impl Trait` inside the `Result`), and patterns in
//! parameters whose bindings the name can use.

use std::fmt::Display;

use lock_runtime::{LockError, distributed_lock};

struct Point {
    x: i32,
    y: i32,
}

struct Wrapper(u32, &'static str);

#[distributed_lock(name = "impl:<id>")]
async fn impl_trait_arg(
    id: impl Display,
    items: impl IntoIterator<Item = u8>,
) -> Result<usize, LockError> {
    Ok(items.into_iter().count())
}

#[distributed_lock(name = "ret:<id>")]
async fn impl_trait_in_result(id: u32) -> Result<impl Display, LockError> {
    Ok(id * 2)
}

#[distributed_lock(name = "tuple:<a>:<b>")]
async fn tuple_pattern((a, b): (u32, String)) -> Result<u32, LockError> {
    Ok(a + b.len() as u32)
}

#[distributed_lock(name = "point:<x>:<y>")]
async fn struct_pattern(Point { x, y }: Point) -> Result<i32, LockError> {
    Ok(x + y)
}

#[distributed_lock(name = "wrapped:<n>:<name>:<rest.0>")]
async fn tuple_struct_pattern(
    Wrapper(n, name): Wrapper,
    mut rest: (u8, u8),
    _: u8,
) -> Result<u8, LockError> {
    rest.1 += 1;
    let _ = (n, name);
    Ok(rest.1)
}

#[distributed_lock(name = "ref:<v>")]
async fn reference_pattern(&v: &u32) -> Result<u32, LockError> {
    Ok(v)
}

pub(super) fn main() {
    let _ = impl_trait_arg("x", vec![1, 2]);
    let _ = impl_trait_in_result(1);
    let _ = tuple_pattern((1, "s".into()));
    let _ = struct_pattern(Point { x: 1, y: 2 });
    let _ = tuple_struct_pattern(Wrapper(1, "n"), (1, 2), 0);
    let _ = reference_pattern(&1);
}
