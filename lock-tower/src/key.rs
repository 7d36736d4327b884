//! Where a request's lock name comes from.
//!
//! A [`KeySource`] looks at a request's head and returns the name of the lock to hold while
//! the request is served, `None` to let the request through unlocked, or an error (answered
//! with 400 / `INVALID_ARGUMENT`) when the request carries an unusable value.
//!
//! | source | key from | example |
//! |---|---|---|
//! | [`PathParams`] (feature `axum`) | the matched route's path parameters | `PathParams::new("stock:<id>")` |
//! | [`Headers`] | request headers / gRPC metadata | `Headers::new("stock:<x-product-id>")` |
//! | [`UriPattern`] | a URI path pattern, for any tower stack | `UriPattern::new("/stock/{id}/reserve", "stock:<id>")` |
//! | [`FromFn`] | a closure | `key::from_fn(\|parts\| …)` |
//!
//! Templates name their placeholders in angle brackets. Every value taken from the request is
//! untrusted: it is bounded in length ([`LockLayer::max_key_value_len`](crate::LockLayer::max_key_value_len),
//! default [`DEFAULT_MAX_KEY_VALUE_LEN`]) and [escaped](escape), so that it can neither alias
//! another key (`"1:x"` cannot pose as two segments), nor pick a Redis Cluster slot (`{…}`),
//! nor carry control bytes.
//!
//! Rendering is injective: two different tuples of values never render to the same lock name.
//! Escaped values consist of ASCII letters, digits and `%XX` only, and a template must
//! separate neighbouring placeholders with text holding at least one other character
//! (`"cart:<user>.<item>"` is fine; `"<a><b>"` and `"<a>x<b>"` are rejected, see
//! [`KeyTemplate::try_new`]), so where each value ends is never ambiguous.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;
use lock_runtime::LockError;

/// The default bound on one value taken from a request (a path parameter, a header), in bytes,
/// before escaping.
pub const DEFAULT_MAX_KEY_VALUE_LEN: usize = 128;

/// Computes the lock name of a request.
///
/// Implemented by [`PathParams`], [`Headers`], [`UriPattern`] and [`FromFn`]; implement it
/// yourself for anything else.
pub trait KeySource: Send + Sync + 'static {
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
}

/// Conversion into a [`KeySource`], used by [`LockLayer::new`](crate::LockLayer::new).
///
/// Every key source converts into itself; with the `axum` feature a template string
/// (`"stock:<id>"`) becomes [`PathParams`].
pub trait IntoKeySource {
    /// The key source.
    type Source: KeySource;

    /// Converts.
    fn into_key_source(self) -> Self::Source;
}

impl<K: KeySource> IntoKeySource for K {
    type Source = K;

    fn into_key_source(self) -> K {
        self
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoKeySource for &str {
    type Source = PathParams;

    fn into_key_source(self) -> PathParams {
        PathParams::new(self)
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoKeySource for String {
    type Source = PathParams;

    fn into_key_source(self) -> PathParams {
        PathParams::new(&self)
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
/// A [`KeyTemplate`] escapes a little less: it keeps those of `-._~` that its own literal text
/// does not use (so `"stock:<id>"` renders a UUID as it is, while `"cart.<user>.<item>"`
/// escapes the `.` in values).
///
/// ```
/// assert_eq!(lock_tower::key::escape("42"), "42");
/// assert_eq!(lock_tower::key::escape("1:x"), "1%3Ax");
/// assert_eq!(lock_tower::key::escape("a.b"), "a%2Eb");
/// assert_eq!(lock_tower::key::escape("{slot}"), "%7Bslot%7D");
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

/// A lock-name template such as `"stock:<id>"`: literal text and `<name>` placeholders.
///
/// Rendering fills each placeholder with a value taken from the request, bounded in length and
/// [escaped](escape), except that those of `-._~` the template's literal text does not use are
/// kept (`"stock:<id>"` renders `id = "9f1c-77"` as `stock:9f1c-77`; `"cart.<u>.<i>"`
/// renders `u = "a.b"` as `a%2Eb`); a missing value means "no key" (the request passes
/// through unlocked).
///
/// Versions before 0.1's injectivity fix kept `-._~` whatever the template: for a template
/// whose literal text uses one of them, a value containing it now names a different lock, so
/// do not serve such keys from old and new instances side by side.
/// Rendering is injective (see [`try_new`](KeyTemplate::try_new) for the rule that makes it
/// so).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: Arc<str>,
    parts: Arc<[Part]>,
    /// Which of [`UNRESERVED`] values keep (bit i for `UNRESERVED[i]`): those the literal
    /// text does not use.
    keep: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Value(String),
}

/// Why a key template was rejected by [`KeyTemplate::try_new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    template: String,
    reason: &'static str,
}

impl TemplateError {
    /// What is wrong with the template.
    pub fn reason(&self) -> &'static str {
        self.reason
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid lock key template {:?}: {}",
            self.template, self.reason
        )
    }
}

impl std::error::Error for TemplateError {}

/// Whether `c` can appear in an [escaped](escape) value.
fn in_escaped_value(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '%'
}

impl KeyTemplate {
    /// Parses a template.
    ///
    /// # Panics
    ///
    /// On a malformed template (see [`try_new`](KeyTemplate::try_new)), like axum's router
    /// panics on a malformed route: it is a programming error.
    pub fn new(template: &str) -> KeyTemplate {
        match KeyTemplate::try_new(template) {
            Ok(t) => t,
            Err(error) => panic!("{error}"),
        }
    }

    /// Parses a template, or says why it is malformed: an unclosed `<`, a stray `>`, an empty
    /// `<>`, a control character, an empty template, or two placeholders not separated by a
    /// character that escaped values never contain (anything but ASCII letters, digits and
    /// `%`): `"<a><b>"` and `"<a>x<b>"` are rejected because `a="1x", b="2"` and
    /// `a="1", b="x2"` would name the same lock; write `"<a>:<b>"` or `"<a>.x.<b>"`.
    pub fn try_new(template: &str) -> Result<KeyTemplate, TemplateError> {
        KeyTemplate::parse(template).map_err(|reason| TemplateError {
            template: template.to_owned(),
            reason,
        })
    }

    fn parse(template: &str) -> Result<KeyTemplate, &'static str> {
        if template.chars().any(char::is_control) {
            return Err("control characters are not allowed");
        }
        let mut parts = Vec::new();
        let mut rest = template;
        while !rest.is_empty() {
            match rest.find(['<', '>']) {
                None => {
                    parts.push(Part::Literal(rest.to_owned()));
                    break;
                }
                Some(i) if rest.as_bytes()[i] == b'>' => return Err("`>` without `<`"),
                Some(i) => {
                    if i > 0 {
                        parts.push(Part::Literal(rest[..i].to_owned()));
                    }
                    let after = &rest[i + 1..];
                    let end = after.find('>').ok_or("`<` without `>`")?;
                    let name = &after[..end];
                    if name.is_empty() {
                        return Err("empty placeholder `<>`");
                    }
                    if name.contains('<') {
                        return Err("nested `<`");
                    }
                    parts.push(Part::Value(name.to_owned()));
                    rest = &after[end + 1..];
                }
            }
        }
        if parts.is_empty() {
            return Err("the template is empty");
        }
        // Injectivity: between two placeholders there must be a character that no escaped
        // value contains, so that the end of each value is unambiguous.
        let mut after_value = false;
        for part in &parts {
            match part {
                Part::Value(_) if after_value => {
                    return Err(
                        "two placeholders must be separated by a character other than \
                                ASCII letters, digits and `%` (such as `:` or `.`)",
                    );
                }
                Part::Value(_) => after_value = true,
                Part::Literal(text) if text.chars().any(|c| !in_escaped_value(c)) => {
                    after_value = false;
                }
                Part::Literal(_) => {}
            }
        }
        let mut keep = 0u8;
        for (i, u) in UNRESERVED.iter().enumerate() {
            let used = parts
                .iter()
                .any(|p| matches!(p, Part::Literal(text) if text.as_bytes().contains(u)));
            if !used {
                keep |= 1 << i;
            }
        }
        Ok(KeyTemplate {
            source: template.into(),
            parts: parts.into(),
            keep,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The placeholder names, in order.
    pub fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Value(name) => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// Renders the template, looking each placeholder up with `value`.
    ///
    /// `Ok(None)` when a value is missing; [`LockError::InvalidName`] when a value is empty or
    /// longer than `max_value_len` bytes.
    pub fn render<'a>(
        &self,
        max_value_len: usize,
        mut value: impl FnMut(&str) -> Option<Cow<'a, [u8]>>,
    ) -> Result<Option<String>, LockError> {
        let mut out = String::new();
        for part in self.parts.iter() {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Value(name) => {
                    let Some(v) = value(name) else {
                        return Ok(None);
                    };
                    if v.is_empty() {
                        return Err(invalid(name, "a key value must not be empty"));
                    }
                    if v.len() > max_value_len {
                        return Err(invalid(
                            name,
                            "a key value is longer than the layer's maximum",
                        ));
                    }
                    escape_keeping(&v, self.keep, &mut out);
                }
            }
        }
        Ok(Some(out))
    }
}

fn invalid(placeholder: &str, reason: &'static str) -> LockError {
    LockError::InvalidName {
        name: format!("<{}>", placeholder.chars().take(60).collect::<String>()),
        reason,
    }
}

impl fmt::Debug for KeyTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KeyTemplate").field(&self.source).finish()
    }
}

/// Keys from the matched axum route's path parameters: `PathParams::new("stock:<id>")` on a
/// route `/stock/{id}/reserve`.
///
/// Works under `Router::layer` and `Router::route_layer` (routing has happened by then). A
/// request whose route has no such parameter, or that matched no route, passes through
/// unlocked. Values are the percent-decoded parameters, as axum's `Path` extractor sees them;
/// a parameter that is not UTF-8 after decoding is rejected with 400.
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
#[derive(Debug, Clone)]
pub struct PathParams {
    template: KeyTemplate,
}

#[cfg(feature = "axum")]
impl PathParams {
    /// Keys from `template`, whose placeholders name path parameters.
    ///
    /// # Panics
    ///
    /// On a malformed template (see [`KeyTemplate::new`]).
    pub fn new(template: &str) -> PathParams {
        PathParams {
            template: KeyTemplate::new(template),
        }
    }
}

#[cfg(feature = "axum")]
impl KeySource for PathParams {
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
        // polling it here keeps key computation synchronous (axum 0.8 has no synchronous
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

/// Keys from request headers (gRPC metadata are headers too):
/// `Headers::new("stock:<x-product-id>")`. Placeholders name headers; a request without one of
/// them passes through unlocked. Values are the raw header bytes (the first value of a repeated
/// header).
#[derive(Debug, Clone)]
pub struct Headers {
    template: KeyTemplate,
    names: Arc<[HeaderName]>,
}

impl Headers {
    /// Keys from `template`, whose placeholders name headers (case-insensitive).
    ///
    /// # Panics
    ///
    /// On a malformed template or a placeholder that is not a valid header name.
    pub fn new(template: &str) -> Headers {
        let template = KeyTemplate::new(template);
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

impl KeySource for Headers {
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

/// Keys from a URI path pattern, for any tower stack:
/// `UriPattern::new("/stock/{id}/reserve", "stock:<id>")`.
///
/// The pattern is matched segment by segment against the request path: literal segments must
/// be equal, `{name}` captures one segment and `{*name}` (last segment only) the rest of the
/// path. A request whose path does not match passes through unlocked. Captured values are
/// percent-decoded before they are bounded and escaped.
#[derive(Debug, Clone)]
pub struct UriPattern {
    segments: Arc<[Segment]>,
    template: KeyTemplate,
}

#[derive(Debug, Clone)]
enum Segment {
    Literal(String),
    Capture(String),
    Rest(String),
}

impl UriPattern {
    /// Keys from `template` for request paths that match `pattern`.
    ///
    /// # Panics
    ///
    /// On a malformed pattern or template, or a template placeholder that the pattern does not
    /// capture.
    pub fn new(pattern: &str, template: &str) -> UriPattern {
        let template = KeyTemplate::new(template);
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

impl KeySource for UriPattern {
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
fn percent_decode(s: &str) -> Cow<'_, [u8]> {
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

/// A key source from a closure; made by [`from_fn`].
#[derive(Clone)]
pub struct FromFn<F> {
    f: F,
}

/// Keys computed by a closure from the request head. Return `None` to let a request through
/// unlocked.
///
/// The closure's result is used as the lock name as it is (the runtime still rejects names
/// over [`MAX_NAME_LEN`](lock_runtime::MAX_NAME_LEN) bytes or with control characters, which
/// is answered with 400): [`escape`] untrusted parts yourself.
///
/// ```
/// use lock_tower::key::{self, escape};
///
/// let source = key::from_fn(|parts: &http::request::Parts| {
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

impl<F> KeySource for FromFn<F>
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
mod tests {
    use super::*;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut b = http::Request::builder().uri(uri);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn escaping_is_injective_and_removes_separators() {
        assert_eq!(escape("abcXYZ019"), "abcXYZ019");
        assert_eq!(escape("a-1.2_~"), "a%2D1%2E2%5F%7E");
        assert_eq!(escape("a:b"), "a%3Ab");
        assert_eq!(escape("a%3Ab"), "a%253Ab");
        assert_eq!(escape("{x}"), "%7Bx%7D");
        assert_eq!(escape("\n\0é"), "%0A%00%C3%A9");
    }

    #[test]
    fn templates_parse_and_reject_malformed_ones() {
        let t = KeyTemplate::new("a:<x>:b:<y>");
        assert_eq!(t.placeholders().collect::<Vec<_>>(), ["x", "y"]);
        for bad in ["", "a<", "a>", "<>", "a<b<c>>", "a\nb"] {
            assert!(KeyTemplate::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn placeholders_must_be_separated_by_a_character_values_never_contain() {
        for bad in [
            "<a><b>",
            "x:<a><b>:y",
            "<a>x<b>",
            "<a>%<b>",
            "<a>12%<b>",
            "p:<a>:<b><c>",
        ] {
            let error = KeyTemplate::try_new(bad).unwrap_err();
            assert!(error.reason().contains("separated"), "{bad:?}: {error}");
            assert_eq!(error.template(), bad);
        }
        for good in [
            "<a>",
            "cart.<user>.<item>",
            "<a>:<b>",
            "<a>x.y<b>",
            "<a>é<b>",
            "<a>-<b>_<c>",
        ] {
            assert!(KeyTemplate::try_new(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    #[should_panic(expected = "separated")]
    fn adjacent_placeholders_panic_in_new() {
        KeyTemplate::new("<a><b>");
    }

    /// Every value of 1..=`max_len` characters over `alphabet`.
    fn values(alphabet: &[char], max_len: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut out = Vec::new();
        for _ in 0..max_len {
            all = all
                .iter()
                .flat_map(|v| alphabet.iter().map(move |c| format!("{v}{c}")))
                .collect();
            out.extend(all.iter().cloned());
        }
        out
    }

    fn render_all(t: &KeyTemplate, vals: &[&str]) -> String {
        let mut i = 0;
        t.render(64, |_| {
            i += 1;
            Some(Cow::Borrowed(vals[i - 1].as_bytes()))
        })
        .unwrap()
        .unwrap()
    }

    #[test]
    fn distinct_value_tuples_render_to_distinct_names_exhaustively() {
        use std::collections::HashMap;
        // The alphabet holds the separators the templates use, `%`, a letter and a digit.
        let alphabet = ['a', '1', '.', '-', ':', '%', 'x'];
        let vals = values(&alphabet, 3);
        for template in [
            "cart.<user>.<item>",
            "<a>:<b>",
            "x<a>.x<b>x",
            "<a>-x-<b>",
            "<a>.%<b>",
        ] {
            let t = KeyTemplate::new(template);
            let mut seen: HashMap<String, (String, String)> = HashMap::new();
            for a in &vals {
                for b in &vals {
                    let name = render_all(&t, &[a, b]);
                    if let Some(prev) = seen.insert(name.clone(), (a.clone(), b.clone())) {
                        panic!(
                            "{template:?}: {prev:?} and {:?} both render to {name:?}",
                            (a, b)
                        );
                    }
                }
            }
        }
        let small = values(&['a', '.', '-', '%'], 2);
        let t = KeyTemplate::new("<a>.<b>-<c>");
        let mut seen = std::collections::HashSet::new();
        for a in &small {
            for b in &small {
                for c in &small {
                    assert!(seen.insert(render_all(&t, &[a, b, c])), "{a:?} {b:?} {c:?}");
                }
            }
        }
        // The examples of the finding.
        let t = KeyTemplate::new("cart.<user>.<item>");
        assert_ne!(render_all(&t, &["a.b", "c"]), render_all(&t, &["a", "b.c"]));
    }

    #[test]
    fn rendering_bounds_and_escapes_values() {
        let t = KeyTemplate::new("stock:<id>");
        let r = |v: &'static str, max| t.render(max, |_| Some(Cow::Borrowed(v.as_bytes())));
        assert_eq!(r("42", 8).unwrap().as_deref(), Some("stock:42"));
        assert_eq!(r("1:x", 8).unwrap().as_deref(), Some("stock:1%3Ax"));
        assert!(matches!(
            r("123456789", 8),
            Err(LockError::InvalidName { .. })
        ));
        assert!(matches!(r("", 8), Err(LockError::InvalidName { .. })));
        assert_eq!(t.render(8, |_| None).unwrap(), None);
    }

    #[test]
    fn unreserved_punctuation_is_kept_unless_the_template_uses_it() {
        let render = |template: &str, vals: &[&str]| {
            let t = KeyTemplate::new(template);
            let mut vals = vals.iter();
            t.render(64, |_| vals.next().map(|v| Cow::Borrowed(v.as_bytes())))
                .unwrap()
                .unwrap()
        };
        assert_eq!(
            render("stock:<id>", &["9f1c-77.a_b~"]),
            "stock:9f1c-77.a_b~"
        );
        assert_eq!(render("cart.<u>.<i>", &["a.b-c", "d"]), "cart.a%2Eb-c.d");
        assert_eq!(render("cart.<u>.<i>", &["a", "b.c"]), "cart.a.b%2Ec");
        assert_eq!(render("t-<a>:<b>", &["x-y", "z_w"]), "t-x%2Dy:z_w");
        // `%` and anything else stay escaped.
        assert_eq!(render("s:<id>", &["1%2:x"]), "s:1%252%3Ax");
    }

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
