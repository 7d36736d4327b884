//! [`Headers`]: lock names from request headers and gRPC metadata.

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;
use lock_runtime::LockError;

use super::{NameSource, NameTemplate};

/// Lock names from request headers (gRPC metadata are headers too):
/// `Headers::new("stock:<x-product-id>")`. Placeholders name headers; a request without one of
/// them passes through unlocked. Values are the raw header bytes (the first value of a repeated
/// header).
#[derive(Debug, Clone)]
pub struct Headers {
    template: NameTemplate,
    names: Arc<[HeaderName]>,
}

impl Headers {
    /// Lock names from `template`, whose placeholders name headers (case-insensitive).
    ///
    /// # Panics
    ///
    /// On a malformed template or a placeholder that is not a valid header name.
    pub fn new(template: &str) -> Headers {
        let template = NameTemplate::new(template);
        let names = template
            .placeholders()
            .map(|p| {
                HeaderName::from_bytes(p.as_bytes())
                    .unwrap_or_else(|_| panic!("`<{p}>` in {template:?} is not a header name"))
            })
            .collect();
        Headers { template, names }
    }
}

impl NameSource for Headers {
    /// The template as written.
    fn metrics_group(&self) -> Option<&str> {
        Some(self.template.as_str())
    }

    fn lock_name(
        &self,
        request: &mut Parts,
        max_value_len: usize,
    ) -> Result<Option<String>, LockError> {
        let mut names = self.names.iter();
        self.template.render(max_value_len, |_| {
            // Placeholders come in template order, like `names`.
            let name = names.next()?;
            request
                .headers
                .get(name)
                .map(|v| Cow::Owned(v.as_bytes().to_vec()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::test_parts as parts;

    #[test]
    fn headers_fill_placeholders_in_order() {
        let h = Headers::new("t:<x-tenant>:p:<X-Product-Id>");
        let mut p = parts("/", &[("x-product-id", "7"), ("x-tenant", "a b")]);
        assert_eq!(
            h.lock_name(&mut p, 64).unwrap().as_deref(),
            Some("t:a%20b:p:7")
        );
        let mut p = parts("/", &[("x-tenant", "a")]);
        assert_eq!(h.lock_name(&mut p, 64).unwrap(), None);
    }
}
