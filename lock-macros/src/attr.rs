//! Parsing the arguments of `#[distributed_lock(…)]`: the options, key templates, durations.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitStr, Path, Token};

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(client);
    syn::custom_keyword!(on_lost);
    syn::custom_keyword!(abort);
    syn::custom_keyword!(ignore);
}

/// The argument names, for error messages.
const VALID_ARGS: &str = "`key`, `wait`, `lease`, `client`, `on_lost`, `crate`";

/// The parsed arguments. Only `key` is required; that is checked by [`LockArgs::key`] so that
/// the other arguments can be reported first.
#[derive(Default)]
pub(crate) struct LockArgs {
    pub(crate) key: Option<KeyTemplate>,
    pub(crate) wait: Option<DurationArg>,
    pub(crate) lease: Option<DurationArg>,
    pub(crate) client: Option<Expr>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) krate: Option<Path>,
}

/// `on_lost = abort | ignore`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum OnLost {
    Abort,
    Ignore,
}

/// A duration given as a string literal, in milliseconds.
pub(crate) struct DurationArg {
    pub(crate) millis: u64,
}

/// A key template: literal text and `<param.field>` placeholders.
#[derive(Debug)]
pub(crate) struct KeyTemplate {
    pub(crate) lit: LitStr,
    pub(crate) parts: Vec<KeyPart>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyPart {
    /// Literal text, unescaped (`<<` already turned into `<`).
    Text(String),
    /// A placeholder: a parameter (or `self`) and field names / tuple indices after it.
    Placeholder { root: String, fields: Vec<String> },
}

impl LockArgs {
    /// The key template, or the "missing key" error pointing at the attribute.
    pub(crate) fn key(&self) -> syn::Result<&KeyTemplate> {
        self.key.as_ref().ok_or_else(|| {
            syn::Error::new(
                Span::call_site(),
                "missing `key` argument: `#[distributed_lock]` needs the lock key, \
                 e.g. `#[distributed_lock(key = \"stock:<id>\")]`",
            )
        })
    }
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = LockArgs::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::key) {
                let name = input.parse::<kw::key>()?;
                no_duplicate(&args.key, name.span, "key")?;
                input.parse::<Token![=]>()?;
                let lit = string_value(input, "key", "a template like \"stock:<id>\"")?;
                args.key = Some(KeyTemplate::parse(lit)?);
            } else if lookahead.peek(kw::wait) {
                let name = input.parse::<kw::wait>()?;
                no_duplicate(&args.wait, name.span, "wait")?;
                input.parse::<Token![=]>()?;
                args.wait = Some(DurationArg::parse(input, "wait")?);
            } else if lookahead.peek(kw::lease) {
                let name = input.parse::<kw::lease>()?;
                no_duplicate(&args.lease, name.span, "lease")?;
                input.parse::<Token![=]>()?;
                let lease = DurationArg::parse(input, "lease")?;
                args.lease = Some(lease);
            } else if lookahead.peek(kw::client) {
                let name = input.parse::<kw::client>()?;
                no_duplicate(&args.client, name.span, "client")?;
                input.parse::<Token![=]>()?;
                args.client = Some(input.parse()?);
            } else if lookahead.peek(kw::on_lost) {
                let name = input.parse::<kw::on_lost>()?;
                no_duplicate(&args.on_lost, name.span, "on_lost")?;
                input.parse::<Token![=]>()?;
                args.on_lost = Some(OnLost::parse(input)?);
            } else if lookahead.peek(Token![crate]) {
                let name = input.parse::<Token![crate]>()?;
                no_duplicate(&args.krate, name.span, "crate")?;
                input.parse::<Token![=]>()?;
                let lit = string_value(input, "crate", "a path like \"::lock_runtime\"")?;
                args.krate = Some(lit.parse::<Path>().map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        format!(
                            "`crate` must be a path like \"::lock_runtime\", got {:?}",
                            lit.value()
                        ),
                    )
                })?);
            } else if input.peek(Ident) {
                let unknown: Ident = input.parse()?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!("unknown argument `{unknown}`; expected one of: {VALID_ARGS}"),
                ));
            } else {
                return Err(lookahead.error());
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

fn no_duplicate<T>(seen: &Option<T>, span: Span, name: &str) -> syn::Result<()> {
    match seen {
        Some(_) => Err(syn::Error::new(
            span,
            format!("duplicate argument `{name}`: it may be given only once"),
        )),
        None => Ok(()),
    }
}

/// The string literal after `name =`, or an error saying what was expected.
fn string_value(input: ParseStream<'_>, name: &str, example: &str) -> syn::Result<LitStr> {
    if input.peek(LitStr) {
        return input.parse();
    }
    let found: Expr = input.parse()?;
    Err(syn::Error::new_spanned(
        found,
        format!("`{name}` takes a string literal: {example}"),
    ))
}

impl OnLost {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::abort) {
            input.parse::<kw::abort>()?;
            Ok(OnLost::Abort)
        } else if lookahead.peek(kw::ignore) {
            input.parse::<kw::ignore>()?;
            Ok(OnLost::Ignore)
        } else {
            Err(lookahead.error())
        }
    }
}

impl DurationArg {
    fn parse(input: ParseStream<'_>, name: &str) -> syn::Result<Self> {
        let lit = string_value(
            input,
            name,
            "a duration like \"250ms\", \"5s\" or \"1m30s\"",
        )?;
        let millis = parse_duration(&lit.value()).map_err(|msg| {
            syn::Error::new(
                lit.span(),
                format!("invalid `{name}` duration {:?}: {msg}", lit.value()),
            )
        })?;
        if name == "lease" && millis == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "`lease` must be at least 1ms (omit `lease` to have the watchdog renew the lock)",
            ));
        }
        Ok(DurationArg { millis })
    }
}

/// Parses `"250ms"`, `"5s"`, `"1m30s"`, `"1h"`: numbers with units `h`, `m`, `s`, `ms`, largest
/// first, each at most once. Returns milliseconds.
pub(crate) fn parse_duration(text: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected whole numbers with units `h`, `m`, `s` or `ms`, largest first, \
                            like \"250ms\", \"5s\" or \"1m30s\"";
    if text.is_empty() {
        return Err(format!("the duration is empty; {EXPECTED}"));
    }
    let mut rest = text;
    let mut total: u128 = 0;
    // Index into UNITS of the last unit seen: units must strictly decrease.
    let mut last: Option<usize> = None;
    const UNITS: [(&str, u128); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return Err(EXPECTED.to_string());
        }
        let number: u128 = rest[..digits]
            .parse()
            .map_err(|_| "number too large".to_string())?;
        rest = &rest[digits..];
        let unit_len = rest.len()
            - rest
                .trim_start_matches(|c: char| c.is_ascii_alphabetic())
                .len();
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(
                if let Some(c) = rest.chars().next().filter(|_| unit.is_empty()) {
                    format!("unexpected `{c}` after `{number}`; {EXPECTED}")
                } else if unit.is_empty() {
                    format!("`{number}` has no unit; {EXPECTED}")
                } else {
                    format!("unknown unit `{unit}`; {EXPECTED}")
                },
            );
        };
        if last.is_some_and(|l| index <= l) {
            return Err(format!("`{unit}` is out of order or repeated; {EXPECTED}"));
        }
        last = Some(index);
        total = number
            .checked_mul(UNITS[index].1)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| "the duration is too long".to_string())?;
    }
    u64::try_from(total).map_err(|_| "the duration is too long".to_string())
}

impl KeyTemplate {
    fn parse(lit: LitStr) -> syn::Result<Self> {
        let parts = parse_template(&lit.value()).map_err(|msg| syn::Error::new(lit.span(), msg))?;
        Ok(KeyTemplate { lit, parts })
    }
}

/// Splits a key template into text and placeholders. `<<` and `>>` are a literal `<` and `>`.
pub(crate) fn parse_template(text: &str) -> Result<Vec<KeyPart>, String> {
    const HOW: &str = "placeholders are written `<param>` or `<param.field>`; \
                       write `<<` or `>>` for a literal `<` or `>`";
    if text.is_empty() {
        return Err("the lock key must not be empty".to_string());
    }
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        match c {
            '<' if chars.peek().map(|&(_, c)| c) == Some('<') => {
                chars.next();
                literal.push('<');
            }
            '>' if chars.peek().map(|&(_, c)| c) == Some('>') => {
                chars.next();
                literal.push('>');
            }
            '>' => return Err(format!("unmatched `>` in the lock key; {HOW}")),
            '<' => {
                let body_start = start + 1;
                let Some(len) = text[body_start..].find('>') else {
                    return Err(format!(
                        "unclosed placeholder `{}` in the lock key; {HOW}",
                        &text[start..]
                    ));
                };
                let body = &text[body_start..body_start + len];
                // Skip the placeholder's characters and its `>`.
                while chars.next_if(|&(i, _)| i <= body_start + len).is_some() {}
                if body.is_empty() {
                    return Err(format!(
                        "empty placeholder `<>` in the lock key: name a parameter, like `<id>`; {HOW}"
                    ));
                }
                let placeholder = parse_placeholder(body).ok_or_else(|| {
                    format!(
                        "invalid placeholder `<{body}>` in the lock key: expected a parameter name, \
                         optionally with fields, like `<id>`, `<order.id>` or `<self.tenant>`"
                    )
                })?;
                if !literal.is_empty() {
                    parts.push(KeyPart::Text(std::mem::take(&mut literal)));
                }
                parts.push(placeholder);
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(KeyPart::Text(literal));
    }
    Ok(parts)
}

fn parse_placeholder(body: &str) -> Option<KeyPart> {
    let mut segments = body.split('.');
    let root = segments.next()?;
    if !is_ident(root) {
        return None;
    }
    let fields = segments
        .map(|s| (is_ident(s) || is_index(s)).then(|| s.to_string()))
        .collect::<Option<Vec<_>>>()?;
    Some(KeyPart::Placeholder {
        root: root.to_string(),
        fields,
    })
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
        && s != "_"
}

fn is_index(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ph(root: &str, fields: &[&str]) -> KeyPart {
        KeyPart::Placeholder {
            root: root.into(),
            fields: fields.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn durations_parse_with_units_and_combinations() {
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("0s"), Ok(0));
        assert_eq!(parse_duration("5s"), Ok(5_000));
        assert_eq!(parse_duration("1m"), Ok(60_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("1m30s"), Ok(90_000));
        assert_eq!(parse_duration("1h2m3s4ms"), Ok(3_723_004));
    }

    #[test]
    fn bad_durations_are_rejected() {
        for bad in [
            "",
            "5",
            "s",
            "5 s",
            "5sec",
            "1.5s",
            "-1s",
            "30s1m",
            "1s1s",
            "5S",
            "1m 30s",
            "99999999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn templates_split_into_text_and_placeholders() {
        assert_eq!(
            parse_template("stock:<id>"),
            Ok(vec![KeyPart::Text("stock:".into()), ph("id", &[])])
        );
        assert_eq!(
            parse_template("<self.tenant>:order:<order.customer.id>/<pair.0>"),
            Ok(vec![
                ph("self", &["tenant"]),
                KeyPart::Text(":order:".into()),
                ph("order", &["customer", "id"]),
                KeyPart::Text("/".into()),
                ph("pair", &["0"]),
            ])
        );
        assert_eq!(
            parse_template("plain"),
            Ok(vec![KeyPart::Text("plain".into())])
        );
        assert_eq!(
            parse_template("a<<b>>c{d}"),
            Ok(vec![KeyPart::Text("a<b>c{d}".into())])
        );
    }

    #[test]
    fn bad_templates_are_rejected() {
        for bad in [
            "", "a<>", "a<id", "a<id.", "a>b", "<1>", "<a b>", "<a..b>", "<a.>", "<.a>", "<a<b>",
            "<_>", "<a-b>",
        ] {
            assert!(parse_template(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
