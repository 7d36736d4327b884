//! [`Access`]: which side of a read/write lock a request takes in
//! [`LockLayer::read_write`](crate::LockLayer::read_write) mode.

use std::fmt;
use std::sync::Arc;

use http::Method;
use http::request::Parts;

/// Which side of a [read/write lock](lock_runtime::RwLock) a request is served under, in the
/// read/write mode of a [`LockLayer`](crate::LockLayer).
///
/// Requests with the same lock name taking the read side run together (across every instance);
/// one taking the write side runs alone: it waits until the readers already in are done, and
/// new readers wait behind it (writers go first, so a stream of reads cannot starve a write).
///
/// [`LockLayer::read_write`](crate::LockLayer::read_write) classifies requests with
/// [`Access::of_request`] (by method); [`LockLayer::access`](crate::LockLayer::access) takes
/// your own classifier.
///
/// ```
/// use http::Method;
/// use lock_tower::Access;
///
/// assert_eq!(Access::of_method(&Method::GET), Access::Read);
/// assert_eq!(Access::of_method(&Method::HEAD), Access::Read);
/// assert_eq!(Access::of_method(&Method::POST), Access::Write);
/// assert_eq!(Access::of_method(&Method::DELETE), Access::Write);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// The read side: shared with other readers, excluded by a writer.
    Read,
    /// The write side: excludes readers and other writers.
    Write,
}

impl Access {
    /// The side for a request with `method`: [`Read`](Access::Read) for the *safe* methods of
    /// RFC 9110 (section 9.2.1), `GET`, `HEAD`, `OPTIONS` and `TRACE`, which are defined not to
    /// change the resource; [`Write`](Access::Write) for every other method (`POST`, `PUT`,
    /// `PATCH`, `DELETE`, extension methods, …).
    pub fn of_method(method: &Method) -> Access {
        if method == Method::GET
            || method == Method::HEAD
            || method == Method::OPTIONS
            || method == Method::TRACE
        {
            Access::Read
        } else {
            Access::Write
        }
    }

    /// The default classifier of [`LockLayer::read_write`](crate::LockLayer::read_write):
    /// [`of_method`](Access::of_method) of the request's method.
    ///
    /// Every gRPC call is a `POST`, so this takes the write side for all of them: pass your
    /// own classifier to [`LockLayer::access`](crate::LockLayer::access), by path (the gRPC
    /// method, `/package.Service/Method`).
    pub fn of_request(request: &Parts) -> Access {
        Access::of_method(&request.method)
    }

    /// Whether this is the read side.
    pub fn is_read(self) -> bool {
        self == Access::Read
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Access::Read => "read",
            Access::Write => "write",
        })
    }
}

/// A request classifier, shared by a layer and its services.
#[derive(Clone)]
pub(crate) struct Classifier(Arc<dyn Fn(&Parts) -> Access + Send + Sync>);

impl Classifier {
    pub(crate) fn new<F>(f: F) -> Classifier
    where
        F: Fn(&Parts) -> Access + Send + Sync + 'static,
    {
        Classifier(Arc::new(f))
    }

    pub(crate) fn classify(&self, request: &Parts) -> Access {
        (self.0)(request)
    }
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Classifier(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_methods_read_and_every_other_method_writes() {
        for m in [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE] {
            assert_eq!(Access::of_method(&m), Access::Read, "{m}");
        }
        for m in [
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::CONNECT,
            Method::from_bytes(b"PURGE").unwrap(),
        ] {
            assert_eq!(Access::of_method(&m), Access::Write, "{m}");
        }
    }

    #[test]
    fn grpc_calls_are_posts_and_so_write_by_default() {
        let parts = http::Request::post("/inventory.Inventory/GetStock")
            .header("content-type", "application/grpc")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        assert_eq!(Access::of_request(&parts), Access::Write);
        let by_path = Classifier::new(|p: &Parts| {
            if p.uri.path().starts_with("/inventory.Inventory/Get") {
                Access::Read
            } else {
                Access::Write
            }
        });
        assert_eq!(by_path.classify(&parts), Access::Read);
        assert_eq!(format!("{by_path:?}"), "Classifier(..)");
    }
}
