//! Renamed to [`name`](crate::name): the old names, deprecated, for one release.
//!
//! lock-tower calls what a request locks (`stock:42`) its *lock name*, and keeps *key* for the
//! Redis key the runtime derives from it (`lock:{stock:42}`). Before 0.2 this module was
//! `key` and its items used "key" for the lock name.
//!
//! | old | new |
//! |---|---|
//! | `key::KeySource` | [`name::NameSource`](crate::name::NameSource) |
//! | `key::IntoKeySource`, `into_key_source` | [`name::IntoNameSource`](crate::name::IntoNameSource), `into_name_source` |
//! | `key::KeyTemplate` | [`name::NameTemplate`](crate::name::NameTemplate) |
//! | `key::DEFAULT_MAX_KEY_VALUE_LEN` | [`name::DEFAULT_MAX_NAME_VALUE_LEN`](crate::name::DEFAULT_MAX_NAME_VALUE_LEN) |
//! | `LockLayer::require_key` | [`LockLayer::require_name`](crate::LockLayer::require_name) |
//! | `LockLayer::max_key_value_len` | [`LockLayer::max_name_value_len`](crate::LockLayer::max_name_value_len) |
//! | `LockLayer::key_source` | [`LockLayer::name_source`](crate::LockLayer::name_source) |
//! | `RejectionKind::InvalidKey` | [`RejectionKind::InvalidName`](crate::RejectionKind::InvalidName) |
//!
//! Every other item (`PathParams`, [`Headers`], [`UriPattern`],
//! [`from_fn`], [`escape`], …) is the same item under its new path.
#![allow(deprecated)]

pub use crate::name::*;

/// Renamed to [`NameTemplate`].
#[deprecated(since = "0.2.0", note = "renamed to `lock_tower::name::NameTemplate`")]
pub type KeyTemplate = crate::name::NameTemplate;

/// Renamed to [`DEFAULT_MAX_NAME_VALUE_LEN`].
#[deprecated(
    since = "0.2.0",
    note = "renamed to `lock_tower::name::DEFAULT_MAX_NAME_VALUE_LEN`"
)]
pub const DEFAULT_MAX_KEY_VALUE_LEN: usize = crate::name::DEFAULT_MAX_NAME_VALUE_LEN;

/// Renamed to [`NameSource`].
///
/// Implemented for every `NameSource`, so bounds such as `K: KeySource` keep working.
/// Implementors must now implement `NameSource` instead (the method, `lock_name`, is
/// unchanged): an `impl KeySource for MySource { fn lock_name … }` no longer compiles, since
/// stable Rust has no trait aliases; rename the trait in the `impl` line.
#[deprecated(since = "0.2.0", note = "renamed to `lock_tower::name::NameSource`")]
pub trait KeySource: crate::name::NameSource {}

impl<N: crate::name::NameSource + ?Sized> KeySource for N {}

/// Renamed to [`IntoNameSource`].
///
/// Implemented for every `IntoNameSource`, so bounds such as `T: IntoKeySource<Source = K>`
/// and calls of `into_key_source` keep working. Implementors must now implement
/// `IntoNameSource` (its method is `into_name_source`) instead.
#[deprecated(
    since = "0.2.0",
    note = "renamed to `lock_tower::name::IntoNameSource`"
)]
pub trait IntoKeySource: crate::name::IntoNameSource {
    /// Renamed to [`IntoNameSource::into_name_source`].
    #[deprecated(since = "0.2.0", note = "renamed to `into_name_source`")]
    fn into_key_source(self) -> Self::Source
    where
        Self: Sized,
    {
        self.into_name_source()
    }
}

impl<T: crate::name::IntoNameSource + ?Sized> IntoKeySource for T {}
