//! The forms of `#[distributed_lock]` that must keep compiling (and run: each case's `main`
//! returns), one module per case as a caller writes it, each with the lints it is held to; part
//! of the `behaviour` test binary, built with the workspace's tests (trybuild, which builds every
//! dependency again in a target directory of its own, keeps only the cases that must fail:
//! `tests/ui.rs`).

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
mod visibility_attributes_docs;

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
