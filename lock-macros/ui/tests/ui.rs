//! Compile-time behaviour of `#[distributed_lock]`: the errors for misuse (`ui/fail`, with
//! checked-in `.stderr`). In a crate of their own: trybuild builds every dev-dependency of the
//! crate whose tests it runs, in a target directory of its own, and lock-macros' include the
//! whole test harness; this crate's are lock-runtime with the macro alone, only checked (`cargo
//! check`: compile-fail cases need no code generated). The forms that must keep compiling
//! (`lock-macros/tests/ui/pass`) are modules of lock-macros' `behaviour` test binary, built
//! with the workspace's tests.
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p lock-macros-ui` and
//! read them: each must show the intended error at the intended span. They are checked on
//! stable Rust only: other toolchains word and place diagnostics differently.

#[rustversion::stable]
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
