//! Parsing the arguments of `#[distributed_lock(…)]`: the options and durations (the name
//! template is parsed by [`crate::template`]).

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitInt, LitStr, Path, Token};

use crate::template::{NameTemplate, Placeholder};

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
    syn::custom_keyword!(fenced);
}

/// The argument names, for error messages.
const VALID_ARGS: &str = "`name`, `mode`, `permits`, `capacity`, `max_names`, `wait`, `lease`, \
                          `max_hold`, `fenced`, `client`, `on_lost`, `crate`";

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
    /// The span of `fenced` when given: the mutex is taken with its fencing token.
    pub(crate) fenced: Option<Span>,
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
    FencedMutex,
    Fair,
    Read,
    Write,
    Semaphore { permits: u32, capacity: u32 },
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
            (None, None) if self.fenced.is_some() => Kind::FencedMutex,
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
        let over_collection = self.name.as_ref().and_then(NameTemplate::collection);
        [
            self.check_mode(),
            self.check_semaphore_names(over_collection),
            self.check_max_names(over_collection),
            self.check_permits(),
            self.check_fenced(),
        ]
        .into_iter()
        .flatten()
        .reduce(|mut all, error| {
            all.combine(error);
            all
        })
        .map_or(Ok(()), Err)
    }

    /// `mode` names a lock, not a semaphore.
    fn check_mode(&self) -> Option<syn::Error> {
        let mode = self.mode.as_ref()?;
        let given: Vec<&str> = [("`permits`", &self.permits), ("`capacity`", &self.capacity)]
            .into_iter()
            .filter_map(|(name, arg)| arg.as_ref().map(|_| name))
            .collect();
        (!given.is_empty()).then(|| {
            syn::Error::new(
                mode.span,
                format!(
                    "`mode` cannot be combined with {}: a lock with `permits` or `capacity` \
                     is a semaphore, which has no read, write or fair mode",
                    given.join(" and ")
                ),
            )
        })
    }

    /// A semaphore takes one name: not a name per element of a collection.
    fn check_semaphore_names(&self, over_collection: Option<&Placeholder>) -> Option<syn::Error> {
        let placeholder = over_collection?;
        let arg = self.capacity.as_ref().or(self.permits.as_ref())?;
        let given = if self.capacity.is_some() {
            "capacity"
        } else {
            "permits"
        };
        Some(syn::Error::new(
            arg.span,
            format!(
                "`{given}` cannot be combined with a lock name over a collection \
                 (`<{}>`): a semaphore cannot be one of several locks taken together; \
                 take a mutex, or a `mode = \"read\"`, `\"write\"` or `\"fair\"` lock, \
                 for every name",
                placeholder.text
            ),
        ))
    }

    /// `max_names` bounds the names of a template over a collection, and only those.
    fn check_max_names(&self, over_collection: Option<&Placeholder>) -> Option<syn::Error> {
        match (&self.max_names, over_collection, &self.name) {
            (Some(max_names), None, Some(_)) => Some(syn::Error::new(
                max_names.span,
                "`max_names` applies only to a lock name over a collection, with a `[]` step \
                 like `name = \"stock:<cart.items[].sku>\"`; this name is one lock",
            )),
            _ => None,
        }
    }

    /// `fenced` chooses how a mutex issues its token; the other primitives always issue theirs
    /// with the grant.
    fn check_fenced(&self) -> Option<syn::Error> {
        let span = self.fenced?;
        (self.mode.is_some() || self.capacity.is_some() || self.permits.is_some()).then(|| {
            syn::Error::new(
                span,
                "`fenced` applies to a mutex (no `mode`, `permits` or `capacity`): a fair lock, \
                 a read/write lock and a semaphore always take their fencing token with the grant",
            )
        })
    }

    /// `permits` are taken from a `capacity`, and no more than it has.
    fn check_permits(&self) -> Option<syn::Error> {
        match (&self.permits, &self.capacity) {
            (Some(permits), None) => Some(syn::Error::new(
                permits.span,
                format!(
                    "`permits` needs `capacity`, the number of permits the semaphore has: \
                     e.g. `permits = {}, capacity = 10`",
                    permits.value
                ),
            )),
            (Some(permits), Some(capacity)) if permits.value > capacity.value => {
                Some(syn::Error::new(
                    permits.lit_span,
                    format!(
                        "`permits = {}` is more than `capacity = {}`: a call could never get \
                         its permits",
                        permits.value, capacity.value
                    ),
                ))
            }
            _ => None,
        }
    }
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = LockArgs::default();
        while !input.is_empty() {
            args.parse_arg(input)?;
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        args.check()?;
        Ok(args)
    }
}

impl LockArgs {
    /// One `argument = value`, kept in its field.
    fn parse_arg(&mut self, input: ParseStream<'_>) -> syn::Result<()> {
        let lookahead = input.lookahead1();
        if lookahead.peek(kw::name) {
            let name = input.parse::<kw::name>()?;
            self.parse_name(input, "name", name.span)?;
        } else if input.peek(kw::key) {
            // Deprecated: not offered by `lookahead`, so errors list `name` only.
            let key = input.parse::<kw::key>()?;
            self.parse_name(input, "key", key.span)?;
        } else if lookahead.peek(kw::wait) {
            let span = input.parse::<kw::wait>()?.span;
            equals_once(&self.wait, input, span, "wait")?;
            self.wait = Some(DurationArg::parse(input, "wait")?);
        } else if lookahead.peek(kw::lease) {
            let span = input.parse::<kw::lease>()?.span;
            equals_once(&self.lease, input, span, "lease")?;
            self.lease = Some(DurationArg::parse(input, "lease")?);
        } else if lookahead.peek(kw::max_hold) {
            let span = input.parse::<kw::max_hold>()?.span;
            equals_once(&self.max_hold, input, span, "max_hold")?;
            self.max_hold = Some(DurationArg::parse(input, "max_hold")?);
        } else if lookahead.peek(kw::mode) {
            let span = input.parse::<kw::mode>()?.span;
            equals_once(&self.mode, input, span, "mode")?;
            self.mode = Some(ModeArg::parse(input, span)?);
        } else if lookahead.peek(kw::permits) {
            let span = input.parse::<kw::permits>()?.span;
            equals_once(&self.permits, input, span, "permits")?;
            self.permits = Some(CountArg::parse(input, "permits", span)?);
        } else if lookahead.peek(kw::capacity) {
            let span = input.parse::<kw::capacity>()?.span;
            equals_once(&self.capacity, input, span, "capacity")?;
            self.capacity = Some(CountArg::parse(input, "capacity", span)?);
        } else if lookahead.peek(kw::max_names) {
            let span = input.parse::<kw::max_names>()?.span;
            equals_once(&self.max_names, input, span, "max_names")?;
            self.max_names = Some(CountArg::parse_max_names(input, span)?);
        } else if lookahead.peek(kw::client) {
            let span = input.parse::<kw::client>()?.span;
            equals_once(&self.client, input, span, "client")?;
            self.client = Some(input.parse()?);
        } else if lookahead.peek(kw::on_lost) {
            let span = input.parse::<kw::on_lost>()?.span;
            equals_once(&self.on_lost, input, span, "on_lost")?;
            self.on_lost = Some(OnLost::parse(input)?);
        } else if lookahead.peek(kw::fenced) {
            // A flag: no value.
            let span = input.parse::<kw::fenced>()?.span;
            no_duplicate(&self.fenced, span, "fenced")?;
            self.fenced = Some(span);
        } else if lookahead.peek(Token![crate]) {
            let span = input.parse::<Token![crate]>()?.span;
            equals_once(&self.krate, input, span, "crate")?;
            self.krate = Some(crate_path(input)?);
        } else if input.peek(Ident) {
            let unknown: Ident = input.parse()?;
            return Err(syn::Error::new(
                unknown.span(),
                format!("unknown argument `{unknown}`; expected one of: {VALID_ARGS}"),
            ));
        } else {
            return Err(lookahead.error());
        }
        Ok(())
    }
}

/// The start of `name = value`, once `name` (written at `span`) is parsed: not given before,
/// then `=`.
fn equals_once<T>(
    seen: &Option<T>,
    input: ParseStream<'_>,
    span: Span,
    name: &str,
) -> syn::Result<()> {
    no_duplicate(seen, span, name)?;
    input.parse::<Token![=]>()?;
    Ok(())
}

/// The path after `crate =`, given as a string literal.
fn crate_path(input: ParseStream<'_>) -> syn::Result<Path> {
    let lit = string_value(input, "crate", "a path like \"::lock_runtime\"")?;
    lit.parse::<Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` must be a path like \"::lock_runtime\", got {:?}",
                lit.value()
            ),
        )
    })
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
    /// `max_names = N`: a count, at most [`MAX_MAX_NAMES`].
    fn parse_max_names(input: ParseStream<'_>, span: Span) -> syn::Result<Self> {
        let max_names = CountArg::parse(input, "max_names", span)?;
        if max_names.value > MAX_MAX_NAMES {
            return Err(syn::Error::new(
                max_names.lit_span,
                format!(
                    "`max_names = {}` is too large: at most {MAX_MAX_NAMES} (every name is one \
                     acquisition, in turn)",
                    max_names.value
                ),
            ));
        }
        Ok(max_names)
    }

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

#[cfg(test)]
mod tests {
    use super::*;

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
            (r#"name = "a", fenced"#, Kind::FencedMutex),
            (r#"fenced, name = "a", wait = "1s""#, Kind::FencedMutex),
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
            (
                r#"name = "a", mode = "read", fenced"#,
                "`fenced` applies to a mutex",
            ),
            (
                r#"name = "a", capacity = 2, fenced"#,
                "always take their fencing token with the grant",
            ),
            (
                r#"name = "a", fenced, fenced"#,
                "duplicate argument `fenced`",
            ),
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
}
