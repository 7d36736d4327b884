//! Our scripts as a Redis function library (Redis 7 `FUNCTION LOAD`, called with `FCALL`), and
//! the choice, per endpoint, between calling them as functions or sending them as scripts.
//!
//! Redis runs a script's whole text on every `EVALSHA`: each `local function` of the prelude is
//! a new closure on every call. A library is run once, when it is loaded; a call then runs only
//! its function. For the mutex's acquire and release pair, that is about a quarter less of the
//! server's CPU (a `redis-cli --pipe` harness on Redis 7.0: 8.1 µs per pair as functions, 10.6
//! µs as scripts).
//!
//! - **One library per version of the scripts.** Its name (and each function's) carries a hash
//!   of its code, so clients of two versions of this crate share a server during a rolling
//!   upgrade without replacing each other's functions. An older version's library stays until
//!   someone deletes it (`FUNCTION DELETE`); it is a few tens of kilobytes and unused.
//! - **Loaded when missing.** A call that finds no function (a new server, `FUNCTION FLUSH`, a
//!   restart without persistence, a failover to a replica that never had it) loads the library
//!   and is sent once more, as a script call that finds no script is.
//! - **Scripts where functions cannot be had.** A server before Redis 7, a proxy that does not
//!   know `FCALL`, an ACL that forbids `FCALL` or `FUNCTION LOAD`: the endpoint falls back to
//!   `EVALSHA` for good, with a warning. A Redis Cluster uses scripts from the start.
//! - **The same scripts either way.** A function's body is the script's own file, after the
//!   whole prelude, so both forms run exactly the same Lua.
//! - **Releases run when Redis is out of memory** (`allow-oom`), as their scripts did: a lock
//!   must be releasable and renewable when the server is full. Acquires are refused then. A
//!   server that is full when the library must be loaded refuses `FUNCTION LOAD`: the endpoint
//!   then falls back to scripts (`SCRIPT LOAD` is allowed), for good, with a warning. (An
//!   uncontended mutex is taken with a plain `SET`, so the first function call may well be a
//!   release.)

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Script, ServerErrorKind};

use super::{Call, InLibrary, NATIVE, Native};

/// The library: our scripts (all but the inspect script, which stays a script) as
/// functions.
pub(crate) struct Library {
    /// The `FUNCTION LOAD` source.
    pub(crate) code: String,
    /// Each script (by address) and its function's name.
    names: Vec<(&'static Script, String)>,
}

/// The library, built once.
pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    let entries: Vec<&Native> = NATIVE
        .iter()
        .filter(|n| n.library != InLibrary::No)
        .collect();
    let mut body = String::from(include_str!("prelude.lua"));
    for (i, entry) in entries.iter().enumerate() {
        // The script's own file as the function's body, under the names it uses for its keys
        // and arguments. `clock_read` is the prelude's one per-call value (the server clock,
        // read once per call): a script starts without it, so a function must too.
        let file = entry.file.trim_end();
        match split_entry(file) {
            // Its functions made once, when the library loads, and only the entry per call.
            Some((definitions, entry)) => {
                let _ = write!(
                    body,
                    "\nlocal script_{i}\ndo\n{definitions}\nscript_{i} = function(KEYS, ARGV)\nclock_read = nil\n{entry}\nend\nend\n"
                );
            }
            None => {
                let _ = write!(
                    body,
                    "\nlocal function script_{i}(KEYS, ARGV)\nclock_read = nil\n{file}\nend\n"
                );
            }
        }
    }
    let hash = Script::new(&body).get_hash()[..12].to_owned();
    let library = format!("lockrt_{hash}");
    let mut code = format!("#!lua name={library}\n{body}");
    let mut names = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let name = format!("{library}_{}", entry.stem);
        let flags = if entry.library == InLibrary::AllowOom {
            "'allow-oom'"
        } else {
            ""
        };
        let _ = writeln!(
            code,
            "redis.register_function{{function_name='{name}', callback=script_{i}, flags={{{flags}}}}}"
        );
        names.push((LazyLock::force(entry.script), name));
    }
    Library { code, names }
});

/// A script that only defines functions and constants and then calls one with its keys and
/// arguments (`return acquire(KEYS[1], …)`), split into those definitions and that last line;
/// `None` for any other script.
///
/// Such a script's functions can be made once, when the library loads, instead of as new
/// closures on every call (each one garbage for the server's Lua collector): about 0.5 µs of
/// the server's CPU per fenced lock/unlock pair in `lock-bench uncontended` at 64 workers.
/// The check is by line, on the layout every script here follows: at the top level (no
/// indentation) only comments, `local function …` and its closing `end`, and constants
/// (`local NAME = <number or quoted string>`); so no state outlives a call.
fn split_entry(file: &str) -> Option<(&str, &str)> {
    let (definitions, entry) = file.rsplit_once('\n')?;
    if !entry.starts_with("return ") || !(entry.contains("KEYS") || entry.contains("ARGV")) {
        return None;
    }
    let top_level_ok = definitions
        .lines()
        .filter(|line| !line.is_empty() && !line.starts_with([' ', '\t']))
        .all(|line| {
            line.starts_with("--")
                || line.starts_with("local function ")
                || line == "end"
                || is_constant(line)
        });
    let uses_call_values = definitions.lines().any(|line| {
        !line.trim_start().starts_with("--") && (line.contains("KEYS") || line.contains("ARGV"))
    });
    (top_level_ok && !uses_call_values).then_some((definitions, entry))
}

/// Whether a top-level line defines a constant: `local NAME = 123` or `local NAME = '…'`.
fn is_constant(line: &str) -> bool {
    let Some((name, value)) = line
        .strip_prefix("local ")
        .and_then(|rest| rest.split_once(" = "))
    else {
        return false;
    };
    let name_ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let number = !value.is_empty() && value.chars().all(|c| c.is_ascii_digit());
    let quoted = value.len() >= 2
        && value.starts_with('\'')
        && value.ends_with('\'')
        && !value[1..value.len() - 1].contains('\'');
    name_ok && (number || quoted)
}

impl Library {
    /// The function that runs `script`, if the library has one.
    pub(crate) fn function_of(&'static self, script: &Script) -> Option<&'static str> {
        self.names
            .iter()
            .find(|(ours, _)| std::ptr::eq(*ours, script))
            .map(|(_, name)| name.as_str())
    }

    /// Every function's name.
    pub(crate) fn function_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|(_, name)| name.as_str())
    }
}

/// How one endpoint runs our scripts: as the library's functions (`FCALL`) or as scripts
/// (`EVALSHA`). Shared by the clones of one backend's connection; starts with functions where
/// they can work and falls back to scripts, for good, when the endpoint refuses them.
#[derive(Clone, Debug)]
pub(crate) struct Dialect {
    functions: Arc<AtomicBool>,
}

impl Dialect {
    /// Functions first, scripts if the endpoint refuses them.
    pub(crate) fn functions() -> Dialect {
        Dialect {
            functions: Arc::new(AtomicBool::new(true)),
        }
    }

    /// Scripts only (a Redis Cluster: a library would have to be loaded on every master).
    pub(crate) fn scripts() -> Dialect {
        Dialect {
            functions: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether calls go out as functions.
    pub(crate) fn uses_functions(&self) -> bool {
        self.functions.load(Ordering::Relaxed)
    }

    /// `call`'s command in this dialect: `FCALL` of its function, else its `EVALSHA`.
    pub(crate) fn cmd<'a>(&self, call: &'a Call) -> Cow<'a, Cmd> {
        match call.fcall() {
            Some(fcall) if self.uses_functions() => Cow::Borrowed(fcall),
            _ => call.evalsha(),
        }
    }

    /// After `errs` from calls in this dialect: makes what they need available and says
    /// whether to send them once more. Missing scripts (`scripts`) and a missing library are
    /// loaded; an endpoint that refuses functions gets scripts from now on.
    pub(crate) async fn recover(
        &self,
        conn: &mut (impl ConnectionLike + Send),
        errs: &[&RedisError],
        scripts: &[&'static Script],
    ) -> RedisResult<bool> {
        let errors: Vec<_> = errs.iter().flat_map(|err| server_errors(err)).collect();
        let mut load = errors
            .iter()
            .any(|(kind, _)| *kind == Some(ServerErrorKind::NoScript));
        if let Some(err) = errs
            .iter()
            .find(|err| self.uses_functions() && refuses_functions(err))
        {
            self.fall_back(err);
            load = true;
        } else if self.uses_functions() && errors.iter().any(no_function) {
            tracing::debug!("lock function library missing on the server; loading it");
            match load_library(conn).await {
                Ok(()) => {}
                // A server out of memory refuses `FUNCTION LOAD` but not `SCRIPT LOAD`: a
                // release or renewal must still run there.
                Err(e) if refuses_functions(&e) || e.code() == Some("OOM") => {
                    self.fall_back(&e);
                    load = true;
                }
                Err(e) => return Err(e),
            }
        } else if !load {
            return Ok(false);
        }
        if load {
            tracing::debug!("lock script missing on the server; reloading");
            for script in scripts {
                script.prepare_invoke().load_async(&mut *conn).await?;
            }
        }
        Ok(true)
    }

    fn fall_back(&self, why: &RedisError) {
        if self.functions.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                error = %why,
                "the server refuses Redis functions; running the lock scripts with EVALSHA from now on"
            );
        }
    }
}

/// Loads the library (`FUNCTION LOAD`); one already there (loaded by another client of this
/// version meanwhile) is as good.
async fn load_library(conn: &mut (impl ConnectionLike + Send)) -> RedisResult<()> {
    let loaded: RedisResult<redis::Value> = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&LIBRARY.code)
        .query_async(conn)
        .await;
    match loaded {
        Err(e) if e.detail().is_some_and(|d| d.contains("already exists")) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Each server error in `err` (every failed command of a pipeline), as its kind and detail.
fn server_errors(err: &RedisError) -> Vec<(Option<ServerErrorKind>, String)> {
    match err.clone().into_server_errors() {
        Some(items) => items
            .iter()
            .map(|(_, e)| (e.kind(), e.details().unwrap_or_default().to_owned()))
            .collect(),
        None => {
            let kind = match err.kind() {
                ErrorKind::Server(kind) => Some(kind),
                _ => None,
            };
            vec![(kind, err.detail().unwrap_or_default().to_owned())]
        }
    }
}

/// Whether `err` says a call found no script or function to run, or that the endpoint refuses
/// functions: what [`Dialect::recover`] mends.
pub(crate) fn is_missing(err: &RedisError) -> bool {
    super::is_no_script(err) || is_no_function(err) || refuses_functions(err)
}

/// Whether the server says a function called is not there.
pub(crate) fn is_no_function(err: &RedisError) -> bool {
    server_errors(err).iter().any(no_function)
}

/// Whether the endpoint refuses functions themselves: `FCALL` or `FUNCTION` unknown (before
/// Redis 7, a proxy) or forbidden by the ACL.
pub(crate) fn refuses_functions(err: &RedisError) -> bool {
    server_errors(err).iter().any(refuses)
}

fn no_function((kind, detail): &(Option<ServerErrorKind>, String)) -> bool {
    *kind == Some(ServerErrorKind::ResponseError) && detail == "Function not found"
}

fn refuses((kind, detail): &(Option<ServerErrorKind>, String)) -> bool {
    let detail = detail.to_ascii_lowercase();
    let about_functions = ["'fcall'", "`fcall`", "'function", "`function"]
        .iter()
        .any(|name| detail.contains(name));
    // "unknown command" (Redis 6), "unsupported command" (Envoy) and the like.
    let unknown = ["unknown", "unsupported", "not supported"]
        .iter()
        .any(|word| detail.contains(word));
    about_functions && (*kind == Some(ServerErrorKind::NoPerm) || unknown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_but_inspect_is_a_function() {
        for native in &NATIVE {
            if native.library == InLibrary::No {
                assert_eq!(LIBRARY.function_of(native.script), None);
                continue;
            }
            let name = LIBRARY.function_of(native.script).expect("a function");
            assert!(LIBRARY.code.contains(&format!("function_name='{name}'")));
        }
        assert_eq!(LIBRARY.function_of(&super::super::INSPECT), None);
    }

    #[test]
    fn the_library_is_named_by_its_code_and_releases_run_out_of_memory() {
        let first = LIBRARY.code.lines().next().unwrap();
        let name = first.strip_prefix("#!lua name=lockrt_").unwrap();
        assert_eq!(name.len(), 12);
        assert!(name.chars().all(|c| c.is_ascii_hexdigit()));
        let release = LIBRARY.function_of(&super::super::RELEASE).unwrap();
        let acquire = LIBRARY.function_of(&super::super::ACQUIRE).unwrap();
        assert!(LIBRARY.code.contains(&format!(
            "function_name='{release}', callback=script_1, flags={{'allow-oom'}}"
        )));
        assert!(LIBRARY.code.contains(&format!(
            "function_name='{acquire}', callback=script_0, flags={{}}"
        )));
    }

    #[test]
    fn scripts_that_only_define_and_call_have_their_functions_made_once() {
        // The mutex's pair, the hot path, is made once; a script with statements of its own
        // at the top level (renew: a table filled per call) runs whole on every call.
        assert!(LIBRARY.code.contains("\nlocal script_0\ndo\n"));
        assert!(LIBRARY.code.contains("\nlocal script_1\ndo\n"));
        assert!(split_entry(include_str!("renew.lua").trim_end()).is_none());
        let plain = "local LIMIT = 5\nlocal function f(a)\n  return a\nend\n\nreturn f(KEYS[1])";
        assert_eq!(
            split_entry(plain),
            Some((
                "local LIMIT = 5\nlocal function f(a)\n  return a\nend\n",
                "return f(KEYS[1])"
            ))
        );
        // State that would outlive a call, or a definition that reads the call's values.
        for script in [
            "local seen = {}\nlocal function f(a)\n  return a\nend\nreturn f(KEYS[1])",
            "local n = 0\nn = n + 1\nreturn n + #KEYS",
            "local first = KEYS[1]\nlocal function f()\n  return first\nend\nreturn f(KEYS[1])",
            "local function f()\n  return ARGV[1]\nend\nreturn f(KEYS[1])",
            "local function f(a)\n  return a\nend\nreturn f(1)",
        ] {
            assert_eq!(split_entry(script), None, "{script}");
        }
    }

    #[test]
    fn errors_that_refuse_functions_are_told_apart() {
        let server =
            |kind, detail: &str| RedisError::from((ErrorKind::Server(kind), "", detail.to_owned()));
        use ServerErrorKind::{NoPerm, ResponseError};
        assert!(refuses_functions(&server(
            NoPerm,
            "this user has no permissions to run the 'fcall' command"
        )));
        assert!(refuses_functions(&server(
            NoPerm,
            "this user has no permissions to run the 'function|load' command"
        )));
        assert!(refuses_functions(&server(
            ResponseError,
            "unknown command `FCALL`, with args beginning with: `lockrt_x`, "
        )));
        assert!(refuses_functions(&server(
            ResponseError,
            "unknown command 'FUNCTION', with args beginning with: 'LOAD' "
        )));
        assert!(refuses_functions(&server(
            ResponseError,
            "unsupported command 'FCALL'"
        )));
        assert!(!refuses_functions(&server(
            NoPerm,
            "this user has no permissions to run the 'evalsha' command"
        )));
        // An error from inside a function is the function's, not a refusal of functions.
        assert!(!refuses_functions(&server(
            ResponseError,
            "The user executing the script can't run this command or subcommand script: \
             lockrt_0123456789ab_acquire, on @user_function:12."
        )));
        assert!(!refuses_functions(&server(
            ResponseError,
            "Function not found"
        )));
        assert!(is_no_function(&server(ResponseError, "Function not found")));
        assert!(!is_no_function(&server(
            ResponseError,
            "unknown command 'FCALL'"
        )));
    }
}
