//! How a script's text is put together: `prelude.lua`'s shared definitions that the script
//! uses, then the script; and the sharded twin of a publishing script.

use std::sync::LazyLock;

/// The definitions of `prelude.lua` (the shared functions: the one way a lock is granted, the
/// fencing counter, the sorted-set helpers) that `script` uses, directly or through one
/// another, in the prelude's order, followed by `script`.
///
/// Only those: Redis runs a script's whole text on every call, and each definition it carries
/// costs a closure there.
pub(super) fn with_prelude(script: &str) -> String {
    let definitions = &*PRELUDE;
    let mut kept = vec![false; definitions.len()];
    let mut unread = vec![without_comments(script)];
    while let Some(code) = unread.pop() {
        for (i, definition) in definitions.iter().enumerate() {
            if !kept[i] && definition.names.iter().any(|name| mentions(&code, name)) {
                kept[i] = true;
                unread.push(without_comments(definition.text));
            }
        }
    }
    let mut code = String::new();
    for (definition, _) in definitions.iter().zip(&kept).filter(|(_, kept)| **kept) {
        code.push_str(definition.text);
        code.push_str("\n\n");
    }
    code.push_str(script);
    code
}

/// A piece of `prelude.lua`: one or more top-level `local` definitions, with their comments.
struct Definition {
    /// The names it defines.
    names: Vec<&'static str>,
    text: &'static str,
}

/// `prelude.lua` cut at its blank lines; pieces that define nothing (its header) are left out.
static PRELUDE: LazyLock<Vec<Definition>> = LazyLock::new(|| {
    include_str!("prelude.lua")
        .split("\n\n")
        .filter_map(|text| {
            let names: Vec<&str> = text
                .lines()
                .filter_map(|line| {
                    let rest = line.strip_prefix("local ")?;
                    let rest = rest.strip_prefix("function ").unwrap_or(rest);
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    Some(&rest[..end])
                })
                .filter(|name| !name.is_empty())
                .collect();
            (!names.is_empty()).then(|| Definition {
                names,
                text: text.trim_matches('\n'),
            })
        })
        .collect()
});

/// Lua `text` without its comments (`--` to the end of a line; our scripts have no `--` in a
/// string).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether Lua `code` mentions the identifier `name` (as a whole word).
fn mentions(code: &str, name: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    code.match_indices(name).any(|(at, _)| {
        !word(code[..at].chars().next_back()) && !word(code[at + name.len()..].chars().next())
    })
}

#[cfg(feature = "cluster")]
pub(super) fn sharded(code: &str) -> String {
    let out = code
        .replace("redis.call('PUBLISH'", "redis.call('SPUBLISH'")
        .replace("redis.pcall('PUBLISH'", "redis.pcall('SPUBLISH'")
        .replace(
            "redis.call('PUBSUB', 'NUMSUB'",
            "redis.call('PUBSUB', 'SHARDNUMSUB'",
        );
    debug_assert_ne!(
        out, code,
        "script has no PUBLISH or PUBSUB NUMSUB to turn into its sharded form"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::NATIVE;

    #[test]
    fn a_script_carries_the_prelude_definitions_it_uses_and_no_others() {
        let acquire = with_prelude(include_str!("acquire.lua"));
        for used in [
            "local function grant(",
            "local function next_token(",
            "local function clock_us(",
            "local clock_read",
            "local function others_wait(",
            "local TURN_LAPSE_US",
        ] {
            assert!(acquire.contains(used), "acquire.lua lacks `{used}`");
        }
        for unused in ["queue_head", "grant_member", "permits_held", "yield"] {
            let code = without_comments(&acquire);
            assert!(!mentions(&code, unused), "acquire.lua carries `{unused}`");
        }
        // Every definition is used by some script.
        let all: String = NATIVE.iter().map(|n| with_prelude(n.file)).collect();
        for definition in PRELUDE.iter() {
            assert!(
                all.contains(definition.text),
                "{:?} is never used",
                definition.names
            );
        }
    }

    #[test]
    fn mentions_matches_whole_words() {
        assert!(mentions("return grant(a)", "grant"));
        assert!(!mentions("return grant_member(a)", "grant"));
        assert!(!mentions("local regrant = 1", "grant"));
        assert!(mentions("grant", "grant"));
    }
}
