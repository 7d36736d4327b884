//! The forms of `#[distributed_lock]` that must keep compiling (and run: each case's `main`
//! returns), one module per case as a caller writes it, each with the lints it is held to; part
//! of the `behaviour` test binary, built with the workspace's tests (trybuild, which builds every
//! dependency again in a target directory of its own, keeps only the cases that must fail, in a
//! crate of their own: `lock-macros/ui/tests/ui.rs`).
//!
//! The cases are linted as trybuild's crates were: at rustc's defaults (the workspace's lints are
//! for the crates' code), dead code allowed, no clippy; a case that holds itself to more says so
//! (`collections` denies every warning, `visibility_attributes_docs` denies `missing_docs`, and is
//! public, from the binary's root down, so that the lint sees its public items).
#![allow(
    dead_code,
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    elided_lifetimes_in_paths,
    explicit_outlives_requirements,
    unused_extern_crates,
    clippy::all
)]

mod collections;
mod deprecated_key;
mod generics_lifetimes_where;
mod impl_trait_and_patterns;
mod keyword_and_unicode_fields;
mod methods;
mod modes;
mod odd_names;
mod options;
mod send_future;
pub mod visibility_attributes_docs;

#[test]
fn every_form_compiles_and_runs() {
    collections::main();
    deprecated_key::main();
    generics_lifetimes_where::main();
    impl_trait_and_patterns::main();
    keyword_and_unicode_fields::main();
    methods::main();
    modes::main();
    odd_names::main();
    options::main();
    send_future::main();
    visibility_attributes_docs::main();
}
