//! [`PathParams`] and the template-string conversions, with axum's router.

use std::borrow::Cow;

use http::request::Parts;
use lock_runtime::LockError;

use super::template::invalid;
use super::{IntoNameSource, NameSource, NameTemplate};

#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoNameSource for &str {
    type Source = PathParams;

    fn into_name_source(self) -> PathParams {
        PathParams::new(self)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoNameSource for String {
    type Source = PathParams;

    fn into_name_source(self) -> PathParams {
        PathParams::new(&self)
    }
}

/// Lock names from the matched axum route's path parameters: `PathParams::new("stock:<id>")` on a
/// route `/stock/{id}/reserve`.
///
/// Works under `Router::layer` and `Router::route_layer` (routing has happened by then). A
/// request whose route has no such parameter, or that matched no route, passes through
/// unlocked. Values are the percent-decoded parameters, as axum's `Path` extractor sees them;
/// a parameter that is not UTF-8 after decoding is rejected with 400.
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
#[derive(Debug, Clone)]
pub struct PathParams {
    template: NameTemplate,
}

impl PathParams {
    /// Lock names from `template`, whose placeholders name path parameters.
    ///
    /// # Panics
    ///
    /// On a malformed template (see [`NameTemplate::new`]).
    pub fn new(template: &str) -> PathParams {
        PathParams {
            template: NameTemplate::new(template),
        }
    }
}

impl NameSource for PathParams {
    /// The template as written.
    fn metrics_group(&self) -> Option<&str> {
        Some(self.template.as_str())
    }

    fn lock_name(
        &self,
        request: &mut Parts,
        max_value_len: usize,
    ) -> Result<Option<String>, LockError> {
        use axum::extract::rejection::RawPathParamsRejection;
        use axum::extract::{FromRequestParts, RawPathParams};
        use std::future::Future;
        use std::task::{Context, Poll, Waker};

        // `RawPathParams` only reads the router's extension, so its future is ready at once;
        // polling it here keeps name computation synchronous (axum 0.8 has no synchronous
        // accessor for the params).
        let extract = std::pin::pin!(RawPathParams::from_request_parts(request, &()));
        let params = match extract.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(params)) => params,
            Poll::Ready(Err(RawPathParamsRejection::InvalidUtf8InPathParam(_))) => {
                return Err(invalid(
                    "path parameter",
                    "a path parameter is not UTF-8 after percent-decoding",
                ));
            }
            // No route matched, or the route has no parameters.
            Poll::Ready(Err(_)) | Poll::Pending => return Ok(None),
        };
        self.template.render(max_value_len, |name| {
            params
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| Cow::Owned(v.as_bytes().to_vec()))
        })
    }
}
