//! [`UriPattern`]: lock names from a URI path pattern, for any tower stack.

use std::borrow::Cow;
use std::sync::Arc;

use http::request::Parts;
use lock_runtime::LockError;

use super::{NameSource, NameTemplate};

/// Lock names from a URI path pattern, for any tower stack:
/// `UriPattern::new("/stock/{id}/reserve", "stock:<id>")`.
///
/// The pattern is matched segment by segment against the request path: literal segments must
/// be equal, `{name}` captures one segment and `{*name}` (last segment only) the rest of the
/// path. A request whose path does not match passes through unlocked. Captured values are
/// percent-decoded before they are bounded and escaped.
#[derive(Debug, Clone)]
pub struct UriPattern {
    segments: Arc<[Segment]>,
    template: NameTemplate,
}

#[derive(Debug, Clone)]
enum Segment {
    Literal(String),
    Capture(String),
    Rest(String),
}

impl UriPattern {
    /// Lock names from `template` for request paths that match `pattern`.
    ///
    /// # Panics
    ///
    /// On a malformed pattern or template, or a template placeholder that the pattern does not
    /// capture.
    pub fn new(pattern: &str, template: &str) -> UriPattern {
        let template = NameTemplate::new(template);
        let Some(path) = pattern.strip_prefix('/') else {
            panic!("URI pattern {pattern:?} must start with `/`");
        };
        let raw: Vec<&str> = path.split('/').collect();
        let mut segments = Vec::with_capacity(raw.len());
        for (i, seg) in raw.iter().enumerate() {
            let segment = match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) if name.starts_with('*') => {
                    assert!(
                        i + 1 == raw.len(),
                        "`{{{name}}}` must be the last segment of {pattern:?}"
                    );
                    Segment::Rest(name[1..].to_owned())
                }
                Some(name) => Segment::Capture(name.to_owned()),
                None => {
                    assert!(
                        !seg.contains(['{', '}']),
                        "segment {seg:?} of {pattern:?}: a capture must be a whole segment"
                    );
                    Segment::Literal((*seg).to_owned())
                }
            };
            segments.push(segment);
        }
        for p in template.placeholders() {
            assert!(
                segments.iter().any(|s| matches!(s,
                    Segment::Capture(n) | Segment::Rest(n) if n == p)),
                "`<{p}>` in {template:?} is not captured by {pattern:?}"
            );
        }
        UriPattern {
            segments: segments.into(),
            template,
        }
    }

    fn captures<'p>(&self, path: &'p str) -> Option<Vec<(&str, &'p str)>> {
        let mut rest = path.strip_prefix('/')?;
        let mut captures = Vec::new();
        let last = self.segments.len() - 1;
        for (i, segment) in self.segments.iter().enumerate() {
            if let Segment::Rest(name) = segment {
                captures.push((name.as_str(), rest));
                return Some(captures);
            }
            let (seg, tail) = match rest.split_once('/') {
                Some((seg, tail)) if i < last => (seg, Some(tail)),
                Some(_) => return None,
                None if i == last => (rest, None),
                None => return None,
            };
            match segment {
                Segment::Literal(lit) if lit == seg => {}
                Segment::Literal(_) => return None,
                Segment::Capture(name) => captures.push((name.as_str(), seg)),
                Segment::Rest(_) => unreachable!("handled above"),
            }
            rest = tail.unwrap_or("");
        }
        Some(captures)
    }
}

impl NameSource for UriPattern {
    /// The template as written.
    fn metrics_group(&self) -> Option<&str> {
        Some(self.template.as_str())
    }

    fn lock_name(
        &self,
        request: &mut Parts,
        max_value_len: usize,
    ) -> Result<Option<String>, LockError> {
        let Some(captures) = self.captures(request.uri.path()) else {
            return Ok(None);
        };
        self.template.render(max_value_len, |name| {
            captures
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| percent_decode(v))
        })
    }
}

/// Decodes `%XX` sequences; malformed ones stay as they are.
pub(crate) fn percent_decode(s: &str) -> Cow<'_, [u8]> {
    let bytes = s.as_bytes();
    if !bytes.contains(&b'%') {
        return Cow::Borrowed(bytes);
    }
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::test_parts as parts;

    #[test]
    fn the_metrics_group_is_the_template() {
        let u = UriPattern::new("/stock/{id}/reserve", "stock:<id>");
        assert_eq!(u.metrics_group(), Some("stock:<id>"));
        let f = crate::name::from_fn(|_: &http::request::Parts| None::<String>);
        assert_eq!(f.metrics_group(), None);
    }

    #[test]
    fn uri_patterns_match_whole_segments() {
        let u = UriPattern::new("/stock/{id}/reserve", "stock:<id>");
        let name = |uri| u.lock_name(&mut parts(uri, &[]), 64).unwrap();
        assert_eq!(name("/stock/42/reserve").as_deref(), Some("stock:42"));
        assert_eq!(name("/stock/4%3A2/reserve").as_deref(), Some("stock:4%3A2"));
        assert_eq!(name("/stock/42/reserve?x=1").as_deref(), Some("stock:42"));
        assert_eq!(name("/stock/42"), None);
        assert_eq!(name("/stock/42/reserve/more"), None);
        assert_eq!(name("/other/42/reserve"), None);

        let rest = UriPattern::new("/files/{*path}", "file:<path>");
        let got = rest.lock_name(&mut parts("/files/a/b", &[]), 64).unwrap();
        assert_eq!(got.as_deref(), Some("file:a%2Fb"));
    }

    #[test]
    #[should_panic(expected = "not captured")]
    fn uri_pattern_placeholders_must_be_captured() {
        UriPattern::new("/stock/{id}", "stock:<sku>");
    }
}
