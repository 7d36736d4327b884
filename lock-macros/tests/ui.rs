//! Compile-time behaviour of `#[distributed_lock]`: the forms that must keep compiling
//! (`ui/pass`) and the errors for misuse (`ui/fail`, with checked-in `.stderr`).
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p lock-macros --test ui`
//! and read them: each must show the intended error at the intended span. They are checked
//! on stable Rust only: other toolchains word and place diagnostics differently.

#[rustversion::stable]
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
