//! The gRPC side of the wire that rejections and response bodies share: status codes, the
//! `grpc-message` encoding, and telling a gRPC call from an HTTP request.

use http::HeaderMap;
use http::header::{CONTENT_TYPE, HeaderValue};
use lock_runtime::LockError;

/// gRPC status codes (grpc/doc/statuscodes.md) that the layers answer with.
pub(crate) const INVALID_ARGUMENT: u16 = 3;
pub(crate) const RESOURCE_EXHAUSTED: u16 = 8;
pub(crate) const ABORTED: u16 = 10;
pub(crate) const INTERNAL: u16 = 13;
pub(crate) const UNAVAILABLE: u16 = 14;

/// The trailers that end a gRPC response whose lock was lost while it streamed: `ABORTED`,
/// the error as the message.
pub(crate) fn lost_trailers(error: &LockError) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", ABORTED.into());
    if let Ok(value) = HeaderValue::from_str(&message_encode(&error.to_string())) {
        trailers.insert("grpc-message", value);
    }
    trailers
}

/// Percent-encodes a `grpc-message` as the gRPC HTTP/2 spec asks: every byte outside
/// printable ASCII, and `%`.
pub(crate) fn message_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether a request is a gRPC call, judged by its content type.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_encoded() {
        assert_eq!(message_encode("a b%c\né"), "a b%25c%0A%C3%A9");
    }

    #[test]
    fn grpc_is_detected_by_content_type() {
        let mut h = HeaderMap::new();
        assert!(!is_grpc(&h));
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/grpc+proto"),
        );
        assert!(is_grpc(&h));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(!is_grpc(&h));
    }
}
