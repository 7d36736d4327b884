//! Lock name templates: `"stock:<order.id>"` split into literal text and placeholders, each
//! placeholder checked to be made of Rust names and tuple indices.

use proc_macro2::Span;
use syn::{Ident, Index, LitStr, Member};

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
    /// Parses the template `lit`; an error points at it.
    pub(crate) fn parse(lit: LitStr) -> syn::Result<Self> {
        let parts = parse_template(&lit.value()).map_err(|msg| syn::Error::new(lit.span(), msg))?;
        Ok(NameTemplate { lit, parts })
    }

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

/// How placeholders are written, for error messages.
const HOW: &str = "placeholders are written `<param>` or `<param.field>`; \
                   write `<<` or `>>` for a literal `<` or `>`";

/// Splits a name template into text and placeholders. `<<` and `>>` are a literal `<` and `>`.
///
/// Every malformed template is an `Err` with the message to show at the name: a placeholder
/// that gets through is made of Rust identifiers and tuple indices only, so generating the
/// field accesses cannot fail.
pub(crate) fn parse_template(text: &str) -> Result<Vec<NamePart>, String> {
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
                let (placeholder, end) = placeholder_at(text, start)?;
                // Skip the placeholder's characters and its `>`.
                while chars.next_if(|&(i, _)| i <= end).is_some() {}
                if placeholder.collection.is_some() {
                    only_collection(&parts, &placeholder)?;
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

/// The placeholder whose `<` is at byte `start` of `text`, and where its `>` is.
fn placeholder_at(text: &str, start: usize) -> Result<(Placeholder, usize), String> {
    let body_start = start + 1;
    let Some(len) = text[body_start..].find('>') else {
        return Err(format!(
            "unclosed placeholder `{}` in the lock name; {HOW}",
            &text[start..]
        ));
    };
    let body = &text[body_start..body_start + len];
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
    Ok((placeholder, body_start + len))
}

/// `placeholder`, which runs over a collection, is the only one of the template to do so:
/// none of the `earlier` parts does.
fn only_collection(earlier: &[NamePart], placeholder: &Placeholder) -> Result<(), String> {
    let earlier = earlier.iter().find_map(|part| match part {
        NamePart::Placeholder(p) if p.collection.is_some() => Some(&p.text),
        _ => None,
    });
    match earlier {
        Some(earlier) => Err(format!(
            "at most one `[]` in a lock name: `<{}>` and `<{}>` both run over \
             a collection; a call takes one lock name per element of one \
             collection",
            earlier.escape_debug(),
            placeholder.text.escape_debug()
        )),
        None => Ok(()),
    }
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
