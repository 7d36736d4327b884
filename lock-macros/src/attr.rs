//! Parsing the arguments of `#[distributed_lock(…)]`: the options, name templates, durations.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, Index, LitInt, LitStr, Member, Path, Token};

mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(key);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(max_hold);
    syn::custom_keyword!(mode);
    syn::custom_keyword!(permits);
    syn::custom_keyword!(capacity);
    syn::custom_keyword!(max_names);
    syn::custom_keyword!(client);
    syn::custom_keyword!(on_lost);
    syn::custom_keyword!(abort);
    syn::custom_keyword!(ignore);
}

/// The argument names, for error messages.
const VALID_ARGS: &str = "`name`, `mode`, `permits`, `capacity`, `max_names`, `wait`, `lease`, \
                          `max_hold`, `client`, `on_lost`, `crate`";

/// The values of `mode = "…"`, for error messages.
const VALID_MODES: &str = "\"read\", \"write\", \"fair\"";

/// The longest `max_hold` the runtime accepts (`lock_runtime::MAX_LEASE`, 10 years of 365
/// days), in milliseconds.
const MAX_HOLD_MILLIS: u64 = 10 * 365 * 24 * 3_600_000;

/// `max_names` when it is not given.
pub(crate) const DEFAULT_MAX_NAMES: u32 = 64;

/// The largest `max_names`: every name is one acquisition in turn and one entry of the
/// reentrancy scope.
const MAX_MAX_NAMES: u32 = 1000;

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
    pub(crate) max_hold: Option<DurationArg>,
    pub(crate) mode: Option<ModeArg>,
    pub(crate) permits: Option<CountArg>,
    pub(crate) capacity: Option<CountArg>,
    pub(crate) max_names: Option<CountArg>,
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

/// `mode = "read" | "write" | "fair"`.
pub(crate) struct ModeArg {
    pub(crate) mode: Mode,
    /// The span of the `mode` token.
    pub(crate) span: Span,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Read,
    Write,
    Fair,
}

/// `permits = N`, `capacity = N` or `max_names = N`: an integer literal of at least 1.
pub(crate) struct CountArg {
    pub(crate) value: u32,
    /// The span of the argument's name.
    pub(crate) span: Span,
    /// The span of the literal.
    pub(crate) lit_span: Span,
}

/// Which primitive the fn takes, from `mode`, `permits` and `capacity`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    Read,
    Write,
    Semaphore { permits: u32, capacity: u32 },
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

/// `<root.field.0>`: a parameter and the fields to follow from it; `<root.items[].sku>`: the
/// same over every element of a collection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Placeholder {
    /// What the user wrote between `<` and `>`, for error messages.
    pub(crate) text: String,
    /// The parameter's name without `r#` (or `self`).
    pub(crate) root: String,
    pub(crate) fields: Vec<Field>,
    /// With a `[]` step, how many of `fields` come before it: `root.fields[..n]` is the
    /// collection, and `fields[n..]` are followed from each of its elements.
    pub(crate) collection: Option<usize>,
}

impl Placeholder {
    /// The path before `[]` as written (`cart.items`), for error messages.
    pub(crate) fn collection_text(&self) -> Option<&str> {
        self.collection.map(|_| {
            self.text
                .split_once('[')
                .map_or(&*self.text, |(path, _)| path)
        })
    }
}

impl NameTemplate {
    /// The placeholder with a `[]` step, if any (the parser allows at most one).
    pub(crate) fn collection(&self) -> Option<&Placeholder> {
        self.parts.iter().find_map(|part| match part {
            NamePart::Placeholder(p) if p.collection.is_some() => Some(p),
            _ => None,
        })
    }
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

    /// The primitive to take. The combinations were checked by [`LockArgs::check`]:
    /// `capacity` alone means one permit per call.
    pub(crate) fn kind(&self) -> Kind {
        match (&self.mode, &self.capacity) {
            (_, Some(capacity)) => Kind::Semaphore {
                permits: self.permits.as_ref().map_or(1, |p| p.value),
                capacity: capacity.value,
            },
            (None, None) => Kind::Mutex,
            (Some(mode), None) => match mode.mode {
                Mode::Read => Kind::Read,
                Mode::Write => Kind::Write,
                Mode::Fair => Kind::Fair,
            },
        }
    }

    /// The rules between arguments, each reported where it applies (all at once).
    fn check(&self) -> syn::Result<()> {
        let mut errors: Option<syn::Error> = None;
        let mut push = |error: syn::Error| match &mut errors {
            Some(all) => all.combine(error),
            None => errors = Some(error),
        };
        if let Some(mode) = &self.mode {
            let given: Vec<&str> = [("`permits`", &self.permits), ("`capacity`", &self.capacity)]
                .into_iter()
                .filter_map(|(name, arg)| arg.as_ref().map(|_| name))
                .collect();
            if !given.is_empty() {
                push(syn::Error::new(
                    mode.span,
                    format!(
                        "`mode` cannot be combined with {}: a lock with `permits` or `capacity` \
                         is a semaphore, which has no read, write or fair mode",
                        given.join(" and ")
                    ),
                ));
            }
        }
        let over_collection = self.name.as_ref().and_then(NameTemplate::collection);
        if let (Some(placeholder), Some(arg)) = (
            over_collection,
            self.capacity.as_ref().or(self.permits.as_ref()),
        ) {
            let given = if self.capacity.is_some() {
                "capacity"
            } else {
                "permits"
            };
            push(syn::Error::new(
                arg.span,
                format!(
                    "`{given}` cannot be combined with a lock name over a collection \
                     (`<{}>`): a semaphore cannot be one of several locks taken together; \
                     take a mutex, or a `mode = \"read\"`, `\"write\"` or `\"fair\"` lock, \
                     for every name",
                    placeholder.text
                ),
            ));
        }
        if let (Some(max_names), None, Some(_)) = (&self.max_names, over_collection, &self.name) {
            push(syn::Error::new(
                max_names.span,
                "`max_names` applies only to a lock name over a collection, with a `[]` step \
                 like `name = \"stock:<cart.items[].sku>\"`; this name is one lock",
            ));
        }
        match (&self.permits, &self.capacity) {
            (Some(permits), None) => push(syn::Error::new(
                permits.span,
                format!(
                    "`permits` needs `capacity`, the number of permits the semaphore has: \
                     e.g. `permits = {}, capacity = 10`",
                    permits.value
                ),
            )),
            (Some(permits), Some(capacity)) if permits.value > capacity.value => {
                push(syn::Error::new(
                    permits.lit_span,
                    format!(
                        "`permits = {}` is more than `capacity = {}`: a call could never get \
                         its permits",
                        permits.value, capacity.value
                    ),
                ));
            }
            _ => {}
        }
        errors.map_or(Ok(()), Err)
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
            } else if lookahead.peek(kw::max_hold) {
                let name = input.parse::<kw::max_hold>()?;
                no_duplicate(&args.max_hold, name.span, "max_hold")?;
                input.parse::<Token![=]>()?;
                args.max_hold = Some(DurationArg::parse(input, "max_hold")?);
            } else if lookahead.peek(kw::mode) {
                let name = input.parse::<kw::mode>()?;
                no_duplicate(&args.mode, name.span, "mode")?;
                input.parse::<Token![=]>()?;
                args.mode = Some(ModeArg::parse(input, name.span)?);
            } else if lookahead.peek(kw::permits) {
                let name = input.parse::<kw::permits>()?;
                no_duplicate(&args.permits, name.span, "permits")?;
                input.parse::<Token![=]>()?;
                args.permits = Some(CountArg::parse(input, "permits", name.span)?);
            } else if lookahead.peek(kw::capacity) {
                let name = input.parse::<kw::capacity>()?;
                no_duplicate(&args.capacity, name.span, "capacity")?;
                input.parse::<Token![=]>()?;
                args.capacity = Some(CountArg::parse(input, "capacity", name.span)?);
            } else if lookahead.peek(kw::max_names) {
                let name = input.parse::<kw::max_names>()?;
                no_duplicate(&args.max_names, name.span, "max_names")?;
                input.parse::<Token![=]>()?;
                let max_names = CountArg::parse(input, "max_names", name.span)?;
                if max_names.value > MAX_MAX_NAMES {
                    return Err(syn::Error::new(
                        max_names.lit_span,
                        format!(
                            "`max_names = {}` is too large: at most {MAX_MAX_NAMES} (every name \
                             is one acquisition, in turn)",
                            max_names.value
                        ),
                    ));
                }
                args.max_names = Some(max_names);
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
        args.check()?;
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

impl ModeArg {
    fn parse(input: ParseStream<'_>, span: Span) -> syn::Result<Self> {
        let lit = string_value(input, "mode", &format!("one of {VALID_MODES}"))?;
        let mode = match lit.value().as_str() {
            "read" => Mode::Read,
            "write" => Mode::Write,
            "fair" => Mode::Fair,
            other => {
                return Err(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown mode {other:?}; expected one of: {VALID_MODES} (omit `mode` \
                         for a plain mutex, give `capacity` for a semaphore)"
                    ),
                ));
            }
        };
        Ok(ModeArg { mode, span })
    }
}

impl CountArg {
    fn parse(input: ParseStream<'_>, name: &str, span: Span) -> syn::Result<Self> {
        if !input.peek(LitInt) {
            let found: Expr = input.parse()?;
            let message = match &found {
                Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(_),
                    ..
                }) => {
                    format!("`{name}` takes an integer literal, not a string: write `{name} = 2`")
                }
                Expr::Lit(_) => format!("`{name}` takes an integer literal, like `{name} = 2`"),
                _ => format!(
                    "`{name}` takes an integer literal, like `{name} = 2` (a constant or an \
                     expression cannot be checked at compile time)"
                ),
            };
            return Err(syn::Error::new_spanned(found, message));
        }
        let lit: LitInt = input.parse()?;
        let digits = lit.base10_digits();
        if digits.starts_with('-') {
            return Err(syn::Error::new(
                lit.span(),
                format!("`{name} = {digits}` is negative: it must be at least 1"),
            ));
        }
        if !matches!(lit.suffix(), "" | "u32") {
            return Err(syn::Error::new(
                lit.span(),
                format!(
                    "`{name}` is a `u32`: write it without the suffix `{}`, like `{name} = 2`",
                    lit.suffix()
                ),
            ));
        }
        let value: u32 = lit.base10_parse().map_err(|_| {
            syn::Error::new(
                lit.span(),
                format!("`{name} = {digits}` is too large: at most {}", u32::MAX),
            )
        })?;
        if value == 0 {
            let why = match name {
                "permits" => "every call takes at least one permit",
                "max_names" => "a call over a collection takes at least one lock",
                _ => "a semaphore without permits could never be taken",
            };
            return Err(syn::Error::new(
                lit.span(),
                format!("`{name}` must be at least 1: {why}"),
            ));
        }
        Ok(CountArg {
            value,
            span,
            lit_span: lit.span(),
        })
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
        if name == "lease" && !(10..=MAX_HOLD_MILLIS).contains(&millis) {
            return Err(syn::Error::new(
                lit.span(),
                "`lease` must be between 10ms and 87600h (10 years), the leases the runtime \
                 accepts (omit `lease` to have the watchdog renew the lock)",
            ));
        }
        if name == "max_hold" && millis == 0 {
            return Err(syn::Error::new(
                lit.span(),
                "`max_hold` must be at least 1ms (omit `max_hold` to hold the lock for as long \
                 as the body runs)",
            ));
        }
        if name == "max_hold" && millis > MAX_HOLD_MILLIS {
            return Err(syn::Error::new(
                lit.span(),
                "`max_hold` must be at most 87600h (10 years), the longest hold the runtime \
                 accepts (omit `max_hold` to hold the lock for as long as the body runs)",
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
                    let shown = body.escape_debug();
                    if body.contains(['[', ']']) {
                        format!(
                            "invalid placeholder `<{shown}>` in the lock name: {why}; a \
                             collection is written with `[]` after its path, like `<skus[]>` \
                             or `<cart.items[].sku>`"
                        )
                    } else {
                        format!(
                            "invalid placeholder `<{shown}>` in the lock name: {why}; expected \
                             a parameter name, optionally with fields, like `<id>`, \
                             `<order.id>`, `<pair.0>` or `<self.tenant>`"
                        )
                    }
                })?;
                if placeholder.collection.is_some() {
                    let earlier = parts.iter().find_map(|part| match part {
                        NamePart::Placeholder(p) if p.collection.is_some() => Some(&p.text),
                        _ => None,
                    });
                    if let Some(earlier) = earlier {
                        return Err(format!(
                            "at most one `[]` in a lock name: `<{}>` and `<{}>` both run over \
                             a collection; a call takes one lock name per element of one \
                             collection",
                            earlier.escape_debug(),
                            placeholder.text.escape_debug()
                        ));
                    }
                }
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
    let (path, element) = match body.find(['[', ']']) {
        None => (body, None),
        Some(at) => {
            let (path, step) = body.split_at(at);
            (path, Some(collection_step(path, step)?))
        }
    };
    let mut placeholder = parse_path(body, path)?;
    if let Some(element) = element {
        placeholder.collection = Some(placeholder.fields.len());
        // `element` is empty or starts with `.`: the fields of each element.
        let fields = element.split('.').skip(1).map(field);
        placeholder
            .fields
            .extend(fields.collect::<Result<Vec<_>, _>>()?);
    }
    Ok(placeholder)
}

/// Checks the `[]` step of a placeholder: `path` is what comes before it and `step` starts
/// at its `[` (or a stray `]`). Returns what follows the `[]`: nothing, or `.field…`.
fn collection_step<'a>(path: &str, step: &'a str) -> Result<&'a str, String> {
    const EVERY: &str = "`[]` takes a lock name for every element of the collection";
    if step.starts_with(']') {
        return Err("unmatched `]`".to_string());
    }
    if path.is_empty() {
        return Err(format!(
            "`[]` must follow the path of a collection: a parameter, or a field of one; {EVERY}"
        ));
    }
    let Some(close) = step.find(']') else {
        return Err("unclosed `[`".to_string());
    };
    let inside = &step[1..close];
    if !inside.is_empty() {
        return Err(format!(
            "nothing may stand between `[` and `]` (found `[{}]`): {EVERY}, there is no index \
             or key",
            inside.escape_debug()
        ));
    }
    let after = &step[close + 1..];
    if after.contains('[') {
        return Err(
            "at most one `[]` in a lock name: a call takes one lock name per element of one \
             collection"
                .to_string(),
        );
    }
    if after.contains(']') {
        return Err("unmatched `]`".to_string());
    }
    if !after.is_empty() && !after.starts_with('.') {
        return Err(format!(
            "`[]` must be followed by `.field` or the end of the placeholder, not `{}`",
            after.escape_debug()
        ));
    }
    Ok(after)
}

/// `root.field.0` (a placeholder without `[]`, or the path before it); `body` is the whole
/// placeholder, kept as its text.
fn parse_path(body: &str, path: &str) -> Result<Placeholder, String> {
    let mut segments = path.split('.');
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
        collection: None,
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
            collection: None,
        })
    }

    fn args(text: &str) -> syn::Result<LockArgs> {
        syn::parse_str(text)
    }

    fn error(text: &str) -> String {
        match args(text) {
            Ok(_) => panic!("{text:?} should be rejected"),
            Err(e) => e
                .into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    #[test]
    fn modes_and_semaphores_pick_the_kind() {
        for (text, kind) in [
            (r#"name = "a""#, Kind::Mutex),
            (r#"name = "a", mode = "fair""#, Kind::Fair),
            (r#"mode = "read", name = "a""#, Kind::Read),
            (r#"name = "a", mode = "write", wait = "1s""#, Kind::Write),
            (
                r#"name = "a", capacity = 3"#,
                Kind::Semaphore {
                    permits: 1,
                    capacity: 3,
                },
            ),
            (
                r#"name = "a", permits = 2, capacity = 3"#,
                Kind::Semaphore {
                    permits: 2,
                    capacity: 3,
                },
            ),
            (
                r#"capacity = 4294967295u32, name = "a", permits = 4294967295"#,
                Kind::Semaphore {
                    permits: u32::MAX,
                    capacity: u32::MAX,
                },
            ),
        ] {
            let parsed = args(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(parsed.kind(), kind, "{text:?}");
        }
    }

    #[test]
    fn max_hold_is_a_duration_of_at_least_1ms() {
        let parsed = args(r#"name = "a", max_hold = "1m30s""#).unwrap();
        assert_eq!(parsed.max_hold.map(|d| d.millis), Some(90_000));
        assert!(args(r#"name = "a", max_hold = "1ms""#).is_ok());
        assert!(args(r#"name = "a", max_hold = "87600h""#).is_ok());
        assert!(error(r#"name = "a", max_hold = "0ms""#).contains("at least 1ms"));
        assert!(error(r#"name = "a", max_hold = "87600h1ms""#).contains("at most 87600h"));
        assert!(error(r#"name = "a", max_hold = "5""#).contains("has no unit"));
        // With a fixed lease too: whichever ends first ends the hold.
        assert!(args(r#"name = "a", lease = "5s", max_hold = "1s""#).is_ok());
        assert!(error(r#"name = "a", lease = "5ms""#).contains("between 10ms"));
    }

    #[test]
    fn bad_modes_and_counts_are_rejected() {
        for (text, expected) in [
            (r#"name = "a", mode = "mutex""#, r#"unknown mode "mutex""#),
            (r#"name = "a", mode = read"#, "takes a string literal"),
            (
                r#"name = "a", capacity = 0"#,
                "`capacity` must be at least 1",
            ),
            (
                r#"name = "a", permits = 0, capacity = 1"#,
                "`permits` must be at least 1",
            ),
            (r#"name = "a", permits = -2, capacity = 1"#, "is negative"),
            (r#"name = "a", capacity = 4294967296"#, "too large"),
            (r#"name = "a", capacity = 2i64"#, "suffix `i64`"),
            (r#"name = "a", capacity = "2""#, "not a string"),
            (
                r#"name = "a", capacity = N"#,
                "cannot be checked at compile time",
            ),
            (r#"name = "a", permits = 2"#, "`permits` needs `capacity`"),
            (
                r#"name = "a", permits = 3, capacity = 2"#,
                "more than `capacity = 2`",
            ),
            (
                r#"name = "a", capacity = 2, capacity = 2"#,
                "duplicate argument `capacity`",
            ),
            (
                r#"name = "a", mode = "read", capacity = 2"#,
                "`mode` cannot be combined",
            ),
        ] {
            let message = error(text);
            assert!(message.contains(expected), "{text:?}: {message}");
        }
        // All the rules between arguments are reported together.
        let message = error(r#"name = "a", mode = "fair", permits = 2, capacity = 1"#);
        assert_eq!(message.lines().count(), 2, "{message}");
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

    /// A placeholder over a collection: `before` fields up to the `[]`, then the element's.
    fn each(text: &str, root: &str, before: &[&str], after: &[&str]) -> NamePart {
        let NamePart::Placeholder(mut placeholder) = ph(text, root, &[before, after].concat())
        else {
            unreachable!("ph() makes placeholders");
        };
        placeholder.collection = Some(before.len());
        NamePart::Placeholder(placeholder)
    }

    #[test]
    fn a_collection_step_marks_the_path_before_it() {
        assert_eq!(
            parse_template("stock:<cart.items[].sku>"),
            Ok(vec![
                NamePart::Text("stock:".into()),
                each("cart.items[].sku", "cart", &["items"], &["sku"]),
            ])
        );
        assert_eq!(
            parse_template("<self.w>:<skus[]>:<m[].0.r#type>"),
            Err(
                "at most one `[]` in a lock name: `<skus[]>` and `<m[].0.r#type>` both run \
                 over a collection; a call takes one lock name per element of one collection"
                    .to_string()
            )
        );
        assert_eq!(
            parse_template("<self.w>:<m[].0.r#type>:<<[]>>"),
            Ok(vec![
                ph("self.w", "self", &["w"]),
                NamePart::Text(":".into()),
                each("m[].0.r#type", "m", &[], &["0", "type"]),
                NamePart::Text(":<[]>".into()),
            ])
        );
        let Ok(parts) = parse_template("a:<self.cart.items[].sku.id>") else {
            panic!("rejected");
        };
        let NamePart::Placeholder(placeholder) = &parts[1] else {
            panic!("{parts:?}");
        };
        assert_eq!(placeholder.collection_text(), Some("self.cart.items"));
        assert_eq!(placeholder.collection, Some(2));
    }

    #[test]
    fn bad_collection_steps_are_rejected() {
        for (bad, expected) in [
            ("<[]>", "must follow the path of a collection"),
            ("<[].a>", "must follow the path of a collection"),
            ("<x[]y>", "not `y`"),
            ("<x[]_y>", "not `_y`"),
            ("<x[ ]>", "found `[ ]`"),
            ("<x[0]>", "found `[0]`"),
            ("<x[a]>", "found `[a]`"),
            ("<x[>", "unclosed `[`"),
            ("<x]>", "unmatched `]`"),
            ("<x[]]>", "unmatched `]`"),
            ("<x.[]>", "a field name after a `.` is missing"),
            ("<x[].>", "a field name after a `.` is missing"),
            ("<x[]..a>", "a field name after a `.` is missing"),
            ("<x[].self>", "cannot be a field name"),
            ("<1[]>", "is a number"),
            ("<a[].b[]>", "at most one `[]`"),
            ("<a[][]>", "at most one `[]`"),
            ("<a[]>:<b[]>", "at most one `[]`"),
            ("<a[]>:<a[]>", "at most one `[]`"),
        ] {
            match parse_template(bad) {
                Ok(parts) => panic!("{bad:?} was accepted: {parts:?}"),
                Err(message) => assert!(message.contains(expected), "{bad:?}: {message}"),
            }
        }
    }

    #[test]
    fn max_names_needs_a_collection_and_no_semaphore() {
        let parsed = args(r#"name = "s:<skus[]>", max_names = 3, mode = "write""#).unwrap();
        assert_eq!(parsed.max_names.as_ref().map(|m| m.value), Some(3));
        assert_eq!(parsed.kind(), Kind::Write);
        assert!(args(r#"name = "s:<skus[]>", max_names = 1000"#).is_ok());
        for (text, expected) in [
            (
                r#"name = "s:<sku>", max_names = 3"#,
                "applies only to a lock name over a collection",
            ),
            (r#"name = "s:<skus[]>", max_names = 0"#, "at least 1"),
            (r#"name = "s:<skus[]>", max_names = 1001"#, "at most 1000"),
            (r#"name = "s:<skus[]>", max_names = -1"#, "is negative"),
            (
                r#"name = "s:<skus[]>", max_names = 2, max_names = 2"#,
                "duplicate argument",
            ),
            (
                r#"name = "s:<skus[]>", capacity = 3"#,
                "`capacity` cannot be combined",
            ),
            (
                r#"name = "s:<skus[]>", permits = 2"#,
                "`permits` cannot be combined",
            ),
        ] {
            let message = error(text);
            assert!(message.contains(expected), "{text:?}: {message}");
        }
        // `max_names` before the name is checked against it too.
        assert!(error(r#"max_names = 3, name = "s""#).contains("applies only"));
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
            "[",
            "]",
            "[]",
            "[].",
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
