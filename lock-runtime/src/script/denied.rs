//! What a Redis ACL refused, read from the error: a command the connection's user may not run
//! (`EVALSHA` itself, or a command one of our scripts calls), or the lock's keys or channels.
//!
//! Redis 7.0 names the command only when the client sent it; from inside a script it says "The
//! user executing the script can't run this command or subcommand", followed by the script's
//! SHA1 and the line (`script: <sha>, on @user_script:<line>.`), or from inside a function its
//! name and the line in its library (`script: <name>, on @user_function:<line>.`). Every
//! script's source is known here, so the line names the command, at no cost to the scripts
//! themselves.
//!
//! Redis 7.2 and later, and Valkey, name it: `ACL failure in script: User <u> has no
//! permissions to run the '<cmd>' command script: …`, or `ACL failure in script: No
//! permissions to access a key script: …` (Valkey 9.1 leaves the script's SHA1 or function
//! name out, so the line alone would not name the command there).

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{ErrorKind, RedisError, Script, ServerErrorKind};

use super::with_prelude;

/// Every script's source (classic and sharded) by its SHA1.
static SOURCES: LazyLock<HashMap<String, String>> = LazyLock::new(|| {
    let mut sources = HashMap::new();
    for native in &super::NATIVE {
        let code = with_prelude(native.file);
        #[cfg(feature = "cluster")]
        if code.contains("'PUBLISH'") || code.contains("'PUBSUB', 'NUMSUB'") {
            let sharded = super::sharded(&code);
            sources.insert(Script::new(&sharded).get_hash().to_owned(), sharded);
        }
        sources.insert(Script::new(&code).get_hash().to_owned(), code);
    }
    sources
});

/// What the ACL refused, as words for an error message ("the `pexpire` command", "the lock's
/// keys"), or `None` when `err` is no permission error.
fn denied(err: &RedisError) -> Option<String> {
    let detail = err.detail().unwrap_or_default();
    if err.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) {
        // Sent by the client: "User <u> has no permissions to run the '<cmd>' command", "No
        // permissions to access a key" or "… a channel".
        if let Some(command) = quoted(detail) {
            return Some(format!("the `{command}` command"));
        }
        return Some(target(detail).to_owned());
    }
    if detail.contains("ACL failure in script") {
        return Some(match quoted(detail) {
            Some(command) => format!("the `{command}` command (called by a lock script)"),
            None => target(detail).to_owned(),
        });
    }
    if detail.contains("can't run this command") {
        let command = script_line(detail).and_then(|(sha, line)| command_at(sha, line));
        return Some(match command {
            Some(command) => format!("the `{command}` command (called by a lock script)"),
            None => "a command the lock scripts call".to_owned(),
        });
    }
    if detail.contains("can't access")
        && (detail.contains("@user_script") || detail.contains("@user_function"))
    {
        return Some(target(detail).to_owned());
    }
    None
}

fn target(detail: &str) -> &'static str {
    if detail.contains("channel") {
        "the lock's channels"
    } else {
        "the lock's keys"
    }
}

/// The text between the first pair of single quotes.
fn quoted(detail: &str) -> Option<&str> {
    let (_, rest) = detail.split_once('\'')?;
    let (inner, _) = rest.split_once('\'')?;
    (!inner.is_empty()).then_some(inner)
}

/// `script: <sha>, on @user_script:<line>.` (or `script: <function>, on
/// @user_function:<line>.`) → the SHA1 (or the function's name) and the line.
fn script_line(detail: &str) -> Option<(&str, usize)> {
    let (_, rest) = detail.split_once("script: ")?;
    let (sha, rest) = rest.split_once(',')?;
    let (_, line) = rest
        .split_once("@user_script:")
        .or_else(|| rest.split_once("@user_function:"))?;
    let digits: String = line.chars().take_while(char::is_ascii_digit).collect();
    Some((sha.trim(), digits.parse().ok()?))
}

/// The command called on line `line` (1-based) of the script with SHA1 `sha` (or the library
/// of the function so named), lower-case.
fn command_at(sha: &str, line: usize) -> Option<String> {
    let library = &super::functions::LIBRARY;
    let source = if library.function_names().any(|name| name == sha) {
        &library.code
    } else {
        SOURCES.get(sha)?
    };
    let text = source.lines().nth(line.checked_sub(1)?)?;
    let (_, rest) = text.split_once("call('")?;
    let (command, _) = rest.split_once('\'')?;
    Some(command.to_ascii_lowercase())
}

impl crate::LockError {
    /// A failed Redis command of `op`: [`NoPermission`](crate::LockError::NoPermission) when the
    /// server's ACL refused a command a script runs (read here, where the scripts are known),
    /// else [`Backend`](crate::LockError::Backend).
    pub(crate) fn backend(op: &'static str, source: redis::RedisError) -> Self {
        match denied(&source) {
            Some(denied) => crate::LockError::NoPermission { op, denied, source },
            None => crate::LockError::Backend { op, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_of_the_crate_is_known() {
        for native in &super::super::NATIVE {
            assert!(SOURCES.contains_key(native.script.get_hash()));
        }
    }

    #[test]
    fn a_script_line_names_its_command() {
        let sha = super::super::ACQUIRE.get_hash();
        let source = &SOURCES[sha];
        let line = 1 + source
            .lines()
            .position(|l| l.contains("redis.call('PEXPIRE', lock"))
            .unwrap();
        let detail = format!(
            "The user executing the script can't run this command or subcommand script: {sha}, on @user_script:{line}."
        );
        assert_eq!(script_line(&detail), Some((sha, line)));
        assert_eq!(command_at(sha, line).as_deref(), Some("pexpire"));
        assert_eq!(command_at("0000", line), None);

        let function = super::super::functions::LIBRARY
            .function_of(&super::super::RELEASE)
            .unwrap();
        let code = &super::super::functions::LIBRARY.code;
        let line = 1 + code
            .lines()
            .position(|l| l.contains("redis.call('EXISTS', lock)"))
            .unwrap();
        let detail = format!(
            "The user executing the script can't run this command or subcommand script: {function}, on @user_function:{line}."
        );
        assert_eq!(script_line(&detail), Some((function, line)));
        assert_eq!(command_at(function, line).as_deref(), Some("exists"));
        assert_eq!(
            quoted("User u has no permissions to run the 'evalsha' command"),
            Some("evalsha")
        );
        assert_eq!(quoted("No permissions to access a key"), None);
    }

    /// The wording of Redis 7.2 and later and of Valkey (8.1 names the script, 9.1 does not),
    /// from the servers of the compatibility stage.
    #[test]
    fn the_acl_failure_wording_of_newer_servers_names_the_command() {
        let error = |detail: &str| {
            let parsed = redis::parse_redis_value(format!("-ERR {detail}\r\n").as_bytes());
            match parsed {
                Ok(redis::Value::ServerError(e)) => RedisError::from(e),
                other => panic!("{other:?}"),
            }
        };
        for detail in [
            "ACL failure in script: User u has no permissions to run the 'pexpire' command script: a2c623b62840d49709edba48f0be84177807c9ad, on @user_script:1.",
            "ACL failure in script: User u has no permissions to run the 'pexpire' command script: lock_fair_acquire, on @user_function:2.",
            "ACL failure in script: User u has no permissions to run the 'pexpire' command script: on @user_function:2.",
        ] {
            assert_eq!(
                denied(&error(detail)).as_deref(),
                Some("the `pexpire` command (called by a lock script)"),
                "{detail}"
            );
        }
        assert_eq!(
            denied(&error(
                "ACL failure in script: No permissions to access a key script: on @user_script:3."
            ))
            .as_deref(),
            Some("the lock's keys")
        );
        assert_eq!(
            denied(&error(
                "ACL failure in script: No permissions to access a channel script: on @user_script:3."
            ))
            .as_deref(),
            Some("the lock's channels")
        );
        assert_eq!(denied(&error("Function not found")), None);
    }
}
