//! Where a request's lock name comes from.
//!
//! A [`NameSource`] looks at a request's head and returns the name of the lock to hold while
//! the request is served, `None` to let the request through unlocked, or an error (answered
//! with 400 / `INVALID_ARGUMENT`) when the request carries an unusable value.
//!
//! | source | name from | example |
//! |---|---|---|
//! | `PathParams` (feature `axum`) | the matched route's path parameters | `PathParams::new("stock:<id>")` |
//! | [`Headers`] | request headers / gRPC metadata | `Headers::new("stock:<x-product-id>")` |
//! | [`UriPattern`] | a URI path pattern, for any tower stack | `UriPattern::new("/stock/{id}/reserve", "stock:<id>")` |
//! | [`FromFn`] | a closure | `name::from_fn(\|parts\| …)` |
//!
//! A [`MultiLockLayer`](crate::MultiLockLayer) takes several names at once from the request
//! body, with a [`BodyNameSource`]:
//!
//! | source | names from | example |
//! |---|---|---|
//! | `JsonNames` (feature `json`) | a JSON body, one name per array element | `JsonNames::new("stock:<items[].sku>")` |
//! | [`BodyNames`] | a closure over head and body (a gRPC call's protobuf message: [`grpc_message`]) | `BodyNames::from_fn(\|parts, body\| …)` |
//!
//! Templates name their placeholders in angle brackets. Every value taken from the request is
//! untrusted: it is bounded in length ([`LockLayer::max_name_value_len`](crate::LockLayer::max_name_value_len),
//! default [`DEFAULT_MAX_NAME_VALUE_LEN`]) and [escaped](escape), so that it can neither alias
//! another name (`"1:x"` cannot pose as two segments), nor pick a Redis Cluster slot (`{…}`),
//! nor carry control bytes.
//!
//! Rendering is injective: two different tuples of values never render to the same lock name.
//! Escaped values consist of ASCII letters, digits and `%XX` only, and a template must
//! separate neighbouring placeholders with text holding at least one other character
//! (`"cart:<user>.<item>"` is fine; `"<a><b>"` and `"<a>x<b>"` are rejected, see
//! [`NameTemplate::try_new`]), so where each value ends is never ambiguous.
//!
//! Vocabulary: the *lock name* is what a request locks (`stock:42`, rendered from a
//! template); the *key* is the Redis key the runtime derives from it (`lock:{stock:42}`).
//! This module was called `key` before 0.2; [`crate::key`] still re-exports it under the old
//! names, deprecated.

use std::fmt;

use http::request::Parts;
use lock_runtime::LockError;

#[cfg(feature = "axum")]
mod axum;
mod body;
mod headers;
#[cfg(feature = "json")]
mod json;
mod template;
mod uri;

pub(crate) use self::uri::percent_decode;

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use self::axum::PathParams;
pub use self::body::{BodyNameSource, BodyNames, grpc_message, invalid_body};
pub use self::headers::Headers;
#[cfg(feature = "json")]
#[cfg_attr(docsrs, doc(cfg(feature = "json")))]
pub use self::json::JsonNames;
pub use self::template::{NameTemplate, TemplateError};
pub use self::uri::UriPattern;

/// The default bound on one value taken from a request (a path parameter, a header), in bytes,
/// before escaping.
pub const DEFAULT_MAX_NAME_VALUE_LEN: usize = 128;

/// Computes the lock name of a request.
///
/// Implemented by `PathParams`, [`Headers`], [`UriPattern`] and [`FromFn`]; implement it
/// yourself for anything else.
pub trait NameSource: Send + Sync + 'static {
    /// The lock name for `request`: `Ok(None)` lets the request through unlocked, an error
    /// rejects it (with [`LockError::InvalidName`] it is answered as a bad request).
    ///
    /// `max_value_len` is the layer's bound on each value taken from the request. The parts
    /// are `&mut` only so that extractors can run on them; do not change them.
    fn lock_name(
        &self,
        request: &mut Parts,
        max_value_len: usize,
    ) -> Result<Option<String>, LockError>;

    /// The `group` label of the locks' metrics (lock-runtime's feature `metrics`): a bounded
    /// stand-in for the names, such as the template they are made from (`stock:<id>`).
    /// `None` (the default) leaves it to lock-runtime: the name's text before its first `:`.
    fn metrics_group(&self) -> Option<&str> {
        None
    }
}

/// Conversion into a [`NameSource`], used by [`LockLayer::new`](crate::LockLayer::new).
///
/// Every name source converts into itself; with the `axum` feature a template string
/// (`"stock:<id>"`) becomes `PathParams`.
pub trait IntoNameSource {
    /// The name source.
    type Source: NameSource;

    /// Converts.
    fn into_name_source(self) -> Self::Source;
}

impl<N: NameSource> IntoNameSource for N {
    type Source = N;

    fn into_name_source(self) -> N {
        self
    }
}

/// Escapes an untrusted value for use inside a lock name.
///
/// ASCII letters and digits stay as they are; every other byte becomes `%XX` (upper-case
/// hex), `%` and the punctuation `-._~` included. The result is injective (two different
/// values never escape to the same string) and consists of letters, digits and `%` only, so
/// it contains none of the separators a template's literal text uses (`:`, `.`, `-`, `/`,
/// `{`, `}`, …), nor spaces or control bytes.
///
/// A [`NameTemplate`] escapes a little less: it keeps those of `-._~` that its own literal text
/// does not use (so `"stock:<id>"` renders a UUID as it is, while `"cart.<user>.<item>"`
/// escapes the `.` in values).
///
/// ```
/// assert_eq!(lock_tower::name::escape("42"), "42");
/// assert_eq!(lock_tower::name::escape("1:x"), "1%3Ax");
/// assert_eq!(lock_tower::name::escape("a.b"), "a%2Eb");
/// assert_eq!(lock_tower::name::escape("{slot}"), "%7Bslot%7D");
/// ```
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    escape_keeping(value.as_bytes(), 0, &mut out);
    out
}

/// The unreserved punctuation of URIs, kept in rendered values where the template's own
/// literal text does not use it.
const UNRESERVED: [u8; 4] = *b"-._~";

/// Escapes like [`escape`], but keeps the [`UNRESERVED`] punctuation whose bit is set in
/// `keep`.
fn escape_keeping(value: &[u8], keep: u8, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value {
        let kept = UNRESERVED
            .iter()
            .position(|&u| u == b)
            .is_some_and(|i| keep & (1 << i) != 0);
        if b.is_ascii_alphanumeric() || kept {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
}

/// A name source from a closure; made by [`from_fn`].
#[derive(Clone)]
pub struct FromFn<F> {
    f: F,
}

/// Lock names computed by a closure from the request head. Return `None` to let a request through
/// unlocked.
///
/// The closure's result is used as the lock name as it is (the runtime still rejects names
/// over [`MAX_NAME_LEN`](lock_runtime::MAX_NAME_LEN) bytes or with control characters, which
/// is answered with 400): [`escape`] untrusted parts yourself.
///
/// ```
/// use lock_tower::name::{self, escape};
///
/// let source = name::from_fn(|parts: &http::request::Parts| {
///     let tenant = parts.headers.get("x-tenant")?.to_str().ok()?;
///     Some(format!("tenant:{}", escape(tenant)))
/// });
/// # let _ = source;
/// ```
pub fn from_fn<F>(f: F) -> FromFn<F>
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    FromFn { f }
}

impl<F> NameSource for FromFn<F>
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn lock_name(&self, request: &mut Parts, _: usize) -> Result<Option<String>, LockError> {
        Ok((self.f)(request))
    }
}

impl<F> fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FromFn")
            .field("f", &std::any::type_name::<F>())
            .finish()
    }
}

#[cfg(test)]
pub(crate) fn test_parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut b = http::Request::builder().uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).unwrap().into_parts().0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_injective_and_removes_separators() {
        assert_eq!(escape("abcXYZ019"), "abcXYZ019");
        assert_eq!(escape("a-1.2_~"), "a%2D1%2E2%5F%7E");
        assert_eq!(escape("a:b"), "a%3Ab");
        assert_eq!(escape("a%3Ab"), "a%253Ab");
        assert_eq!(escape("{x}"), "%7Bx%7D");
        assert_eq!(escape("\n\0é"), "%0A%00%C3%A9");
    }
}
