//! Parsing the arguments of `#[distributed_lock(…)]`: the options, name templates, durations.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, Index, LitStr, Member, Path, Token};

mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(key);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(client);
    syn::custom_keyword!(on_lost);
    syn::custom_keyword!(abort);
    syn::custom_keyword!(ignore);
}

/// The argument names, for error messages.
const VALID_ARGS: &str = "`name`, `wait`, `lease`, `client`, `on_lost`, `crate`";

/// The parsed arguments. Only `name` is required; that is checked by [`LockArgs::name`] so
/// that the other arguments can be reported first.
#[derive(Default)]
pub(crate) struct LockArgs {
    pub(crate) name: Option<NameTemplate>,
    /// The span of the `key` token when the name was given as `key = "…"`, the spelling
    /// deprecated since 0.2.0: the expansion warns there.
    pub(crate) deprecated_key: Option<Span>,
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

/// A lock name template: literal text and `<param.field>` placeholders.
#[derive(Debug)]
pub(crate) struct NameTemplate {
    pub(crate) lit: LitStr,
    pub(crate) parts: Vec<NamePart>,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NamePart {
    /// Literal text, unescaped (`<<` already turned into `<`).
    Text(String),
    /// A placeholder: a parameter (or `self`) and field names / tuple indices after it.
    Placeholder(Placeholder),
}

/// `<root.field.0>`: a parameter and the fields to follow from it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// What the user wrote between `<` and `>`, for error messages.
    pub(crate) text: String,
    /// The parameter's name without `r#` (or `self`).
    pub(crate) root: String,
    pub(crate) fields: Vec<Field>,
}

/// One `.field` of a placeholder.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// A named field, without `r#`. Never `self`, `Self`, `super`, `crate` or `_` (they cannot
    /// name a field); other keywords are fields written `r#type` in Rust ([`is_keyword`]).
    Named(String),
    /// A tuple field: `.0`.
    Index(u32),
}

impl Field {
    /// `.field` as a token: a keyword as a raw identifier (`r#type`). The parser let through
    /// only identifiers that can be created (no `self`, `super`, `crate`, `Self` or `_`).
    pub(crate) fn member(&self, span: Span) -> Member {
        match self {
            Field::Index(index) => Member::Unnamed(Index {
                index: *index,
                span,
            }),
            Field::Named(name) if is_keyword(name) => Member::Named(Ident::new_raw(name, span)),
            Field::Named(name) => Member::Named(Ident::new(name, span)),
        }
    }
}

impl LockArgs {
    /// The name template, or the "missing name" error pointing at the attribute.
    pub(crate) fn name(&self) -> syn::Result<&NameTemplate> {
        self.name.as_ref().ok_or_else(|| {
            syn::Error::new(
                Span::call_site(),
                "missing `name` argument: `#[distributed_lock]` needs the lock name, \
                 e.g. `#[distributed_lock(name = \"stock:<id>\")]`",
            )
        })
    }

    /// `name = "…"`, or its deprecated spelling `key = "…"` (`keyword` says which, and
    /// `span` is where it was written).
    fn parse_name(&mut self, input: ParseStream<'_>, keyword: &str, span: Span) -> syn::Result<()> {
        if self.name.is_some() {
            if (keyword == "key") == self.deprecated_key.is_some() {
                no_duplicate(&self.name, span, keyword)?;
            }
            return Err(syn::Error::new(
                span,
                "`name` and `key` are the same argument (`key` is its deprecated spelling): \
                 give only `name`",
            ));
        }
        input.parse::<Token![=]>()?;
        let lit = string_value(input, keyword, "a template like \"stock:<id>\"")?;
        self.name = Some(NameTemplate::parse(lit)?);
        if keyword == "key" {
            self.deprecated_key = Some(span);
        }
        Ok(())
    }
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = LockArgs::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::name) {
                let name = input.parse::<kw::name>()?;
                args.parse_name(input, "name", name.span)?;
            } else if input.peek(kw::key) {
                // Deprecated: not offered by `lookahead`, so errors list `name` only.
                let key = input.parse::<kw::key>()?;
                args.parse_name(input, "key", key.span)?;
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

impl NameTemplate {
    pub(crate) fn parse(lit: LitStr) -> syn::Result<Self> {
        let parts = parse_template(&lit.value()).map_err(|msg| syn::Error::new(lit.span(), msg))?;
        Ok(NameTemplate { lit, parts })
    }
}

/// Splits a name template into text and placeholders. `<<` and `>>` are a literal `<` and `>`.
///
/// Every malformed template is an `Err` with the message to show at the name: a placeholder
/// that gets through is made of Rust identifiers and tuple indices only, so generating the
/// field accesses cannot fail.
pub(crate) fn parse_template(text: &str) -> Result<Vec<NamePart>, String> {
    const HOW: &str = "placeholders are written `<param>` or `<param.field>`; \
                       write `<<` or `>>` for a literal `<` or `>`";
    if text.is_empty() {
        return Err("the lock name must not be empty".to_string());
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
            '>' => return Err(format!("unmatched `>` in the lock name; {HOW}")),
            '<' => {
                let body_start = start + 1;
                let Some(len) = text[body_start..].find('>') else {
                    return Err(format!(
                        "unclosed placeholder `{}` in the lock name; {HOW}",
                        &text[start..]
                    ));
                };
                let body = &text[body_start..body_start + len];
                // Skip the placeholder's characters and its `>`.
                while chars.next_if(|&(i, _)| i <= body_start + len).is_some() {}
                if body.is_empty() {
                    return Err(format!(
                        "empty placeholder `<>` in the lock name: name a parameter, like `<id>`; {HOW}"
                    ));
                }
                let placeholder = parse_placeholder(body).map_err(|why| {
                    let body = body.escape_debug();
                    format!(
                        "invalid placeholder `<{body}>` in the lock name: {why}; expected a \
                         parameter name, optionally with fields, like `<id>`, `<order.id>`, \
                         `<pair.0>` or `<self.tenant>`"
                    )
                })?;
                if !literal.is_empty() {
                    parts.push(NamePart::Text(std::mem::take(&mut literal)));
                }
                parts.push(NamePart::Placeholder(placeholder));
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        parts.push(NamePart::Text(literal));
    }
    Ok(parts)
}

/// The body of a placeholder (between `<` and `>`, not empty); `Err` says what is wrong.
fn parse_placeholder(body: &str) -> Result<Placeholder, String> {
    let mut segments = body.split('.');
    // `split` yields at least one segment.
    let root = segments.next().unwrap_or_default();
    if root.is_empty() {
        return Err("the parameter name before the first `.` is missing".to_string());
    }
    if root.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{root}` is a number, not a parameter name"));
    }
    let root = identifier(root)?;
    if matches!(root.as_str(), "Self" | "super" | "crate") {
        return Err(format!("`{root}` cannot be a parameter name"));
    }
    let fields = segments.map(field).collect::<Result<Vec<_>, _>>()?;
    Ok(Placeholder {
        text: body.to_string(),
        root,
        fields,
    })
}

fn field(segment: &str) -> Result<Field, String> {
    if segment.is_empty() {
        return Err("a field name after a `.` is missing".to_string());
    }
    if segment.bytes().all(|b| b.is_ascii_digit()) {
        if segment.len() > 1 && segment.starts_with('0') {
            return Err(format!(
                "tuple index `{segment}` has a leading zero; write it without, like `.1`"
            ));
        }
        return segment
            .parse()
            .map(Field::Index)
            .map_err(|_| format!("tuple index `{segment}` is too large"));
    }
    let name = identifier(segment)?;
    if matches!(name.as_str(), "self" | "Self" | "super" | "crate") {
        return Err(format!("`{name}` cannot be a field name"));
    }
    Ok(Field::Named(name))
}

/// A Rust identifier, optionally raw (`r#type`), returned without the `r#`: the rules of the
/// Rust reference (Unicode `XID_Start`/`XID_Continue`), which is what the compiler checks when
/// the macro creates the identifier. `_` alone names nothing.
fn identifier(segment: &str) -> Result<String, String> {
    let (raw, name) = match segment.strip_prefix("r#") {
        Some(name) => (true, name),
        None => (false, segment),
    };
    let bad = name.chars().enumerate().find(|&(i, c)| {
        let allowed = if i == 0 {
            c == '_' || unicode_ident::is_xid_start(c)
        } else {
            unicode_ident::is_xid_continue(c)
        };
        !allowed
    });
    let shown = segment.escape_debug();
    match bad {
        _ if name.is_empty() => return Err(format!("`{shown}` is not a Rust name")),
        Some((0, c)) if c.is_ascii_digit() => {
            return Err(format!(
                "`{shown}` starts with a digit, which a Rust name cannot"
            ));
        }
        Some((_, c)) => {
            return Err(format!(
                "`{shown}` contains {c:?}, which cannot be part of a Rust name"
            ));
        }
        None => {}
    }
    if name == "_" {
        return Err("`_` is not a name".to_string());
    }
    if raw && matches!(name, "self" | "Self" | "super" | "crate") {
        return Err(format!("`{segment}` is not a valid raw identifier"));
    }
    Ok(name.to_string())
}

/// Whether `name` is a Rust keyword in some edition (strict or reserved), so that a field or
/// parameter of that name must be written as a raw identifier (`r#type`).
pub(crate) fn is_keyword(name: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
        "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
        "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub",
        "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "try",
        "type", "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
    ];
    KEYWORDS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A placeholder as the parser returns it; `fields` all digits are tuple indices.
    fn ph(text: &str, root: &str, fields: &[&str]) -> NamePart {
        NamePart::Placeholder(Placeholder {
            text: text.into(),
            root: root.into(),
            fields: fields
                .iter()
                .map(|s| match s.parse() {
                    Ok(index) => Field::Index(index),
                    Err(_) => Field::Named(s.to_string()),
                })
                .collect(),
        })
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
            Ok(vec![NamePart::Text("stock:".into()), ph("id", "id", &[])])
        );
        assert_eq!(
            parse_template("<self.tenant>:order:<order.customer.id>/<pair.0>"),
            Ok(vec![
                ph("self.tenant", "self", &["tenant"]),
                NamePart::Text(":order:".into()),
                ph("order.customer.id", "order", &["customer", "id"]),
                NamePart::Text("/".into()),
                ph("pair.0", "pair", &["0"]),
            ])
        );
        assert_eq!(
            parse_template("plain"),
            Ok(vec![NamePart::Text("plain".into())])
        );
        assert_eq!(
            parse_template("a<<b>>c{d}"),
            Ok(vec![NamePart::Text("a<b>c{d}".into())])
        );
    }

    #[test]
    fn bad_templates_are_rejected() {
        for bad in [
            "",
            "a<>",
            "a<id",
            "a<id.",
            "a>b",
            "<1>",
            "<a b>",
            "<a..b>",
            "<a.>",
            "<.a>",
            "<a<b>",
            "<_>",
            "<a-b>",
            "<id.a²>",
            "<²>",
            "<a.0x>",
            "<a.00>",
            "<a.01>",
            "<a.4294967296>",
            "<Self>",
            "<super>",
            "<crate>",
            "<r#self>",
            "<r#_>",
            "<r#>",
            "<a.self>",
            "<a.Self>",
            "<a.super>",
            "<a.crate>",
            "<a.r#crate>",
            "<a._>",
            "<a>>",
            "<a.1e3>",
            "<a.-1>",
            "<r#1>",
            "<a.b c>",
            "<a:b>",
            "<a{b}>",
            "<a\u{200b}>",
        ] {
            assert!(parse_template(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn keywords_unicode_and_raw_names_are_accepted() {
        assert_eq!(
            parse_template("<cfg.type>:<r#type.r#match>:<café.größe>:<t.4294967295>"),
            Ok(vec![
                ph("cfg.type", "cfg", &["type"]),
                NamePart::Text(":".into()),
                ph("r#type.r#match", "type", &["match"]),
                NamePart::Text(":".into()),
                ph("café.größe", "café", &["größe"]),
                NamePart::Text(":".into()),
                ph("t.4294967295", "t", &["4294967295"]),
            ])
        );
        assert_eq!(
            parse_template("<self.r#async>"),
            Ok(vec![ph("self.r#async", "self", &["async"])])
        );
    }

    /// Whatever the template, the parser returns (no panic), and every field it lets through
    /// can be turned into tokens (`Ident::new` panics on anything that is not an identifier).
    /// Accepted templates also round-trip: text re-escaped and placeholders as written give
    /// back the template, so nothing was dropped or invented.
    fn check_no_panic(template: &str) {
        let Ok(parts) = parse_template(template) else {
            return;
        };
        let rendered: String = parts
            .iter()
            .map(|part| match part {
                NamePart::Text(text) => text.replace('<', "<<").replace('>', ">>"),
                NamePart::Placeholder(placeholder) => format!("<{}>", placeholder.text),
            })
            .collect();
        assert_eq!(
            rendered, template,
            "the parts do not add up to the template"
        );
        for part in parts {
            if let NamePart::Placeholder(placeholder) = part {
                assert!(!placeholder.root.is_empty(), "{template:?}");
                for field in &placeholder.fields {
                    let member = field.member(Span::call_site());
                    // Round trip through the tokenizer: what was generated is one member.
                    let text = quote::quote!(#member).to_string();
                    assert!(
                        syn::parse_str::<syn::Member>(&text).is_ok(),
                        "{template:?} generated the member {text:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn odd_templates_never_panic() {
        // Every template of up to 5 characters over this alphabet…
        let alphabet: Vec<char> = "<>.a²_ 0{}:".chars().collect();
        let mut count = 0;
        let mut current: Vec<usize> = Vec::new();
        loop {
            let template: String = current.iter().map(|&i| alphabet[i]).collect();
            check_no_panic(&template);
            count += 1;
            // Next string in length-then-lexicographic order.
            let mut i = current.len();
            loop {
                if i == 0 {
                    current.insert(0, 0);
                    current.iter_mut().for_each(|d| *d = 0);
                    break;
                }
                i -= 1;
                current[i] += 1;
                if current[i] < alphabet.len() {
                    break;
                }
                current[i] = 0;
            }
            if current.len() > 5 {
                break;
            }
        }
        assert_eq!(count, (0..=5).map(|n| alphabet.len().pow(n)).sum::<usize>());

        // …and longer pseudo-random ones over a wider alphabet (raw prefixes, keywords, digits,
        // combining and non-identifier characters).
        let pieces = [
            "<",
            ">",
            ".",
            "a",
            "²",
            "_",
            " ",
            "0",
            "1",
            "{",
            "}",
            ":",
            "r#",
            "#",
            "type",
            "self",
            "Self",
            "crate",
            "super",
            "é",
            "\u{301}",
            "\u{200b}",
            "-",
            "<<",
            ">>",
            "9999999999",
            "\u{10FFFF}",
            "\n",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..50_000 {
            let len = 1 + (state % 12) as usize;
            let mut template = String::new();
            for _ in 0..len {
                // xorshift64
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                template.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            check_no_panic(&template);
        }
    }
}
