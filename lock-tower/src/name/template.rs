//! [`NameTemplate`]: literal text and `<name>` placeholders, rendered injectively.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use lock_runtime::LockError;

use super::{UNRESERVED, escape_keeping};

/// A lock-name template such as `"stock:<id>"`: literal text and `<name>` placeholders.
///
/// Rendering fills each placeholder with a value taken from the request, bounded in length and
/// [escaped](super::escape), except that those of `-._~` the template's literal text does not use are
/// kept (`"stock:<id>"` renders `id = "9f1c-77"` as `stock:9f1c-77`; `"cart.<u>.<i>"`
/// renders `u = "a.b"` as `a%2Eb`); a missing value means "no lock name" (the request passes
/// through unlocked).
///
/// Versions before 0.1's injectivity fix kept `-._~` whatever the template: for a template
/// whose literal text uses one of them, a value containing it now names a different lock, so
/// do not serve such names from old and new instances side by side.
/// Rendering is injective (see [`try_new`](NameTemplate::try_new) for the rule that makes it
/// so).
#[derive(Clone, PartialEq, Eq)]
pub struct NameTemplate {
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

/// Why a name template was rejected by [`NameTemplate::try_new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    template: String,
    reason: &'static str,
}

impl TemplateError {
    #[cfg_attr(not(feature = "json"), allow(dead_code))]
    pub(super) fn new(template: &str, reason: &'static str) -> TemplateError {
        TemplateError {
            template: template.to_owned(),
            reason,
        }
    }

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
            "invalid lock name template {:?}: {}",
            self.template, self.reason
        )
    }
}

impl std::error::Error for TemplateError {}

/// Whether `c` can appear in an [escaped](super::escape) value.
fn in_escaped_value(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '%'
}

impl NameTemplate {
    /// Parses a template.
    ///
    /// # Panics
    ///
    /// On a malformed template (see [`try_new`](NameTemplate::try_new)), like axum's router
    /// panics on a malformed route: it is a programming error.
    pub fn new(template: &str) -> NameTemplate {
        match NameTemplate::try_new(template) {
            Ok(t) => t,
            Err(error) => panic!("{error}"),
        }
    }

    /// Parses a template, or says why it is malformed: an unclosed `<`, a stray `>`, an empty
    /// `<>`, a control character, an empty template, or two placeholders not separated by a
    /// character that escaped values never contain (anything but ASCII letters, digits and
    /// `%`): `"<a><b>"` and `"<a>x<b>"` are rejected because `a="1x", b="2"` and
    /// `a="1", b="x2"` would name the same lock; write `"<a>:<b>"` or `"<a>.x.<b>"`.
    pub fn try_new(template: &str) -> Result<NameTemplate, TemplateError> {
        NameTemplate::parse(template).map_err(|reason| TemplateError {
            template: template.to_owned(),
            reason,
        })
    }

    fn parse(template: &str) -> Result<NameTemplate, &'static str> {
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
        Ok(NameTemplate {
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

/// The error for an unusable value of `placeholder`.
pub(super) fn invalid(placeholder: &str, reason: &'static str) -> LockError {
    LockError::InvalidName {
        name: format!("<{}>", placeholder.chars().take(60).collect::<String>()),
        reason,
    }
}

impl fmt::Debug for NameTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NameTemplate").field(&self.source).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_and_reject_malformed_ones() {
        let t = NameTemplate::new("a:<x>:b:<y>");
        assert_eq!(t.placeholders().collect::<Vec<_>>(), ["x", "y"]);
        for bad in ["", "a<", "a>", "<>", "a<b<c>>", "a\nb"] {
            assert!(NameTemplate::parse(bad).is_err(), "{bad:?}");
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
            let error = NameTemplate::try_new(bad).unwrap_err();
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
            assert!(NameTemplate::try_new(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    #[should_panic(expected = "separated")]
    fn adjacent_placeholders_panic_in_new() {
        NameTemplate::new("<a><b>");
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

    fn render_all(t: &NameTemplate, vals: &[&str]) -> String {
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
            let t = NameTemplate::new(template);
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
        let t = NameTemplate::new("<a>.<b>-<c>");
        let mut seen = std::collections::HashSet::new();
        for a in &small {
            for b in &small {
                for c in &small {
                    assert!(seen.insert(render_all(&t, &[a, b, c])), "{a:?} {b:?} {c:?}");
                }
            }
        }
        // The examples of the finding.
        let t = NameTemplate::new("cart.<user>.<item>");
        assert_ne!(render_all(&t, &["a.b", "c"]), render_all(&t, &["a", "b.c"]));
    }

    #[test]
    fn rendering_bounds_and_escapes_values() {
        let t = NameTemplate::new("stock:<id>");
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
            let t = NameTemplate::new(template);
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
}
