//! [`BodyNameSource`]: several lock names from a request's head and its buffered body, for
//! [`MultiLockLayer`](crate::MultiLockLayer); [`BodyNames`] from a closure; gRPC framing.

use std::fmt;

use bytes::Bytes;
use http::request::Parts;
use lock_runtime::LockError;

/// Computes the lock names of a request from its head and its body, read in full (up to
/// [`max_body_bytes`](crate::MultiLockLayer::max_body_bytes)) by a
/// [`MultiLockLayer`](crate::MultiLockLayer).
///
/// Implemented by [`JsonNames`](crate::name::JsonNames) (feature `json`) and [`BodyNames`];
/// implement it yourself for anything else.
///
/// The layer removes duplicates, bounds the number of distinct names
/// ([`max_names`](crate::MultiLockLayer::max_names)) and rejects an empty list: a request
/// body that names no lock is answered 400, never served unlocked.
pub trait BodyNameSource: Send + Sync + 'static {
    /// The lock names for the request with head `request` and body `body` (in any order,
    /// duplicates allowed). An error rejects the request; [`LockError::InvalidName`] (see
    /// [`invalid_body`]) and [`LockError::TooManyNames`] are answered as bad requests (400 /
    /// `INVALID_ARGUMENT`).
    ///
    /// `max_value_len` is the layer's bound on each value taken from the request
    /// ([`max_name_value_len`](crate::MultiLockLayer::max_name_value_len)).
    fn lock_names(
        &self,
        request: &Parts,
        body: &Bytes,
        max_value_len: usize,
    ) -> Result<Vec<String>, LockError>;

    /// The `group` label of the locks' metrics (lock-runtime's feature `metrics`): a bounded
    /// stand-in for the names, such as the template they are made from (`stock:<id>`).
    /// `None` (the default) leaves it to lock-runtime: the name's text before its first `:`.
    fn metrics_group(&self) -> Option<&str> {
        None
    }
}

/// The error for a request body that cannot be read for lock names, answered 400 /
/// `INVALID_ARGUMENT`: a [`LockError::InvalidName`] naming `<request body>`, with `reason`.
///
/// ```
/// let error = lock_tower::name::invalid_body("not a cart");
/// assert_eq!(error.to_string(), r#"invalid lock name "<request body>": not a cart"#);
/// ```
pub fn invalid_body(reason: &'static str) -> LockError {
    LockError::InvalidName {
        name: "<request body>".into(),
        reason,
    }
}

/// Lock names computed by a closure from the request head and body; made by
/// [`BodyNames::from_fn`].
#[derive(Clone)]
pub struct BodyNames<F> {
    f: F,
}

impl<F> BodyNames<F>
where
    F: Fn(&Parts, &Bytes) -> Result<Vec<String>, LockError> + Send + Sync + 'static,
{
    /// Lock names computed by `f` from the request head and its buffered body: for bodies
    /// that are not JSON, such as a gRPC call's protobuf message (see [`grpc_message`]).
    ///
    /// The closure's names are used as they are (the runtime still rejects names over
    /// [`MAX_NAME_LEN`](lock_runtime::MAX_NAME_LEN) bytes or with control characters, which is
    /// answered with 400): [`escape`](crate::name::escape) untrusted parts yourself. Return
    /// [`invalid_body`] for a body you cannot read.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use http::request::Parts;
    /// use lock_tower::name::{self, BodyNames, escape, invalid_body};
    ///
    /// // A body of comma-separated SKUs.
    /// let names = BodyNames::from_fn(|_: &Parts, body: &Bytes| {
    ///     let text = std::str::from_utf8(body).map_err(|_| invalid_body("not UTF-8"))?;
    ///     Ok(text.split(',').map(|sku| format!("stock:{}", escape(sku.trim()))).collect())
    /// });
    /// # let _ = names;
    /// ```
    pub fn from_fn(f: F) -> BodyNames<F> {
        BodyNames { f }
    }
}

impl<F> BodyNameSource for BodyNames<F>
where
    F: Fn(&Parts, &Bytes) -> Result<Vec<String>, LockError> + Send + Sync + 'static,
{
    fn lock_names(
        &self,
        request: &Parts,
        body: &Bytes,
        _: usize,
    ) -> Result<Vec<String>, LockError> {
        (self.f)(request, body)
    }
}

impl<F> fmt::Debug for BodyNames<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyNames")
            .field("f", &std::any::type_name::<F>())
            .finish()
    }
}

/// The message of a unary gRPC call's body: the body of a gRPC request is a sequence of
/// length-prefixed messages (one byte "compressed" flag, a 4-byte big-endian length, the
/// message), and a unary call sends exactly one. Decode the returned bytes with your protobuf
/// library (`prost::Message::decode`).
///
/// Fails with [`invalid_body`] (400 / `INVALID_ARGUMENT`) when the body is not exactly one
/// complete frame, or when the message is compressed (the layer does not decompress: leave
/// request compression off on clients of a locked method).
///
/// ```
/// use bytes::Bytes;
/// use lock_tower::name::grpc_message;
///
/// let body = Bytes::from_static(&[0, 0, 0, 0, 3, 0x08, 0x96, 0x01]);
/// assert_eq!(&grpc_message(&body).unwrap()[..], &[0x08, 0x96, 0x01]);
/// assert!(grpc_message(&Bytes::from_static(&[0, 0, 0, 0, 9, 1])).is_err());
/// ```
pub fn grpc_message(body: &Bytes) -> Result<Bytes, LockError> {
    const HEADER: usize = 5;
    let Some((&[compressed, a, b, c, d], message)) = body.split_first_chunk::<HEADER>() else {
        return Err(invalid_body(
            "the gRPC request body is shorter than a frame header",
        ));
    };
    if compressed != 0 {
        return Err(invalid_body("the gRPC message is compressed"));
    }
    let len = u32::from_be_bytes([a, b, c, d]);
    if usize::try_from(len).ok() != Some(message.len()) {
        return Err(invalid_body(
            "the gRPC request body is not exactly one complete message",
        ));
    }
    Ok(body.slice(HEADER..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_frames_are_checked_against_hostile_lengths() {
        let ok = Bytes::from_static(&[0, 0, 0, 0, 0]);
        assert!(grpc_message(&ok).unwrap().is_empty());
        for bad in [
            &[][..],
            &[0, 0, 0],
            &[1, 0, 0, 0, 1, 7],
            &[0, 255, 255, 255, 255, 1],
            &[0, 0, 0, 0, 1, 7, 0, 0, 0, 0, 1, 7],
        ] {
            let error = grpc_message(&Bytes::copy_from_slice(bad)).unwrap_err();
            assert!(
                matches!(error, LockError::InvalidName { .. }),
                "{bad:?}: {error}"
            );
        }
    }
}
