//! Compile-time behaviour of `#[distributed_lock]`: the errors for misuse (`ui/fail`, with
//! checked-in `.stderr`). The forms that must keep compiling (`ui/pass`) are modules of the
//! `behaviour` test binary, built with the workspace's tests: here, with trybuild,
//! every dependency would be built again in a target directory of trybuild's own (minutes on a
//! cold CI machine), where compile-fail cases alone only need it checked (`cargo check`).
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p lock-macros --test ui`
//! and read them: each must show the intended error at the intended span. They are checked
//! on stable Rust only: other toolchains word and place diagnostics differently.

#[rustversion::stable]
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
