//! The `#[distributed_lock]` attribute (filled in by the lock-macros issue).

use proc_macro::TokenStream;

/// Placeholder: currently passes the item through unchanged.
#[proc_macro_attribute]
pub fn distributed_lock(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
