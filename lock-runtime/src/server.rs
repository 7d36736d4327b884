//! What the server is, and whether it can run these locks: asked once, when a client is built,
//! so that a server that cannot is a typed error at start-up naming the cause and the fix,
//! never a `Backend` error at the first lock.
//!
//! - **Which server**: `HELLO` without arguments (it changes nothing, and every user may send
//!   it: it needs no ACL permission), whose `server` and `version` fields name Valkey and its own
//!   version. `INFO server` would not: Valkey reports `redis_version:7.2.4` there forever, for
//!   old clients, and its own version as `valkey_version`. A server older than Redis 7.0 (whose
//!   `SET … NX GET`, functions and sharded pub/sub the lock uses) is refused.
//! - **Scripting**: `EVALSHA` of a SHA1 no script has. A server that has it answers `NOSCRIPT`
//!   (nothing runs); one without scripting says the command is unknown (renamed away, a Valkey
//!   9.1 built without its Lua module, a managed service's tier that forbids scripts), and an
//!   ACL that refuses it answers `NOPERM`. Every lock operation beyond an uncontended `SET` is a
//!   script or a function, and the batch and inspect scripts are scripts everywhere, so
//!   `EVALSHA` is needed even where `FCALL` works.
//! - **`WAIT`**, only when [`replica_ack`](crate::LockClientBuilder::replica_ack) is set:
//!   `WAIT 0 0`, which returns at once. ElastiCache Serverless has no `WAIT`.
//!
//! Nothing here uses pattern subscriptions (`PSUBSCRIBE`, unknown on ElastiCache Serverless):
//! waiters subscribe to each lock's own channel.
//!
//! The client asks once, on its command connection when it is built; a later failover to a
//! server of another kind or version is not asked again.

use std::fmt;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::LockError;

/// The Redis-compatible server a [`LockClient`](crate::LockClient) connected to, as it named
/// itself (`HELLO`) when the client was built: see [`LockClient::server`](crate::LockClient::server).
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_runtime::LockError> {
/// let locks = lock_runtime::LockClient::connect("redis://127.0.0.1:6379").await?;
/// if let Some(server) = locks.server() {
///     tracing::info!(%server, "locks on"); // "Valkey 9.1.2", "Redis 7.0.15"
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    name: String,
    version: String,
}

impl ServerInfo {
    /// What the server calls itself, lower case: `"redis"`, `"valkey"`, or another server's
    /// name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its own version (`"9.1.2"` for Valkey 9.1.2, not the `7.2.4` Valkey reports as
    /// `redis_version` for old clients).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether this is Valkey.
    pub fn is_valkey(&self) -> bool {
        self.name == "valkey"
    }

    /// The version as (major, minor, patch), missing parts as 0; `None` when it does not start
    /// with a number.
    pub fn version_numbers(&self) -> Option<(u32, u32, u32)> {
        let mut parts = self.version.split('.').map(|p| {
            let digits: String = p.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some((major, minor, patch))
    }

    /// Whether the server has `DELIFEQ` (Valkey 9.0 and later): a release without waiters then
    /// needs no script.
    pub(crate) fn deletes_if_equal(&self) -> bool {
        self.is_valkey()
            && self
                .version_numbers()
                .is_some_and(|(major, _, _)| major >= 9)
    }

    /// From the fields of a `HELLO` reply (RESP2: a flat list of names and values; RESP3: a
    /// map).
    fn from_hello(reply: &Value) -> Option<ServerInfo> {
        let pairs: Vec<(&Value, &Value)> = match reply {
            Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
            Value::Array(items) => items
                .chunks_exact(2)
                .map(|pair| (&pair[0], &pair[1]))
                .collect(),
            _ => return None,
        };
        let field = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| text(k).is_some_and(|k| k.eq_ignore_ascii_case(name)))
                .and_then(|(_, v)| text(v))
        };
        Some(ServerInfo {
            name: field("server")?.to_ascii_lowercase(),
            version: field("version").unwrap_or_default(),
        })
    }

    /// From `INFO server` (servers before Redis 6 have no `HELLO`): `server_name` and
    /// `valkey_version` where Valkey gives them, else `redis_version`.
    fn from_info(info: &str) -> Option<ServerInfo> {
        let field = |name: &str| {
            info.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key == name).then(|| value.trim().to_owned())
            })
        };
        let name = field("server_name").unwrap_or_else(|| "redis".to_owned());
        let version = field(&format!("{name}_version")).or_else(|| field("redis_version"))?;
        Some(ServerInfo { name, version })
    }
}

impl fmt::Display for ServerInfo {
    /// "Redis 7.0.15", "Valkey 9.1.2", or the name as the server gave it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.name.as_str() {
            "redis" => "Redis",
            "valkey" => "Valkey",
            other => other,
        };
        if self.version.is_empty() {
            f.write_str(name)
        } else {
            write!(f, "{name} {}", self.version)
        }
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone()),
        _ => None,
    }
}

/// Whether the server said it does not know the command (Redis: "unknown command 'x', with
/// args beginning with: …"; also a renamed-away command).
pub(crate) fn unknown_command(err: &RedisError) -> bool {
    err.detail()
        .is_some_and(|d| d.to_ascii_lowercase().starts_with("unknown command"))
}

/// A SHA1 no script has: `EVALSHA` of it runs nothing.
const NO_SCRIPT: &str = "0000000000000000000000000000000000000000";

/// Asks the server what it is and whether it has what this client needs (`replica_ack`: the
/// client was configured to `WAIT` for replicas). See the module docs.
pub(crate) async fn check(
    conn: &mut impl ConnectionLike,
    replica_ack: bool,
) -> Result<Option<ServerInfo>, LockError> {
    let server = identify(conn).await?;
    let named = || match &server {
        Some(server) => server.to_string(),
        None => "the server".to_owned(),
    };
    if let Some(server) = &server
        && server.name == "redis"
        && server
            .version_numbers()
            .is_some_and(|(major, ..)| major < 7)
    {
        return Err(LockError::IncompatibleServer {
            server: named(),
            missing:
                "Redis 7.0 or later (the lock uses `SET … NX GET`, functions and sharded pub/sub)"
                    .into(),
            fix: "upgrade to Redis 7.0 or later, or to Valkey",
            source: None,
        });
    }

    let evalsha = redis::cmd("EVALSHA").arg(NO_SCRIPT).arg(0).clone();
    match evalsha.query_async::<Value>(conn).await {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {}
        Err(e) if unknown_command(&e) => {
            return Err(LockError::IncompatibleServer {
                server: named(),
                missing: "Lua scripting: it does not know `EVALSHA`".into(),
                fix: "use a server with scripting (Valkey 9.1 needs its Lua module loaded; a managed service's tier or a config that renames `EVALSHA` away cannot run these locks)",
                source: Some(e),
            });
        }
        Err(e) => return Err(LockError::backend("connect", e)),
    }

    if replica_ack {
        let wait = redis::cmd("WAIT").arg(0).arg(0).clone();
        match wait.query_async::<Value>(conn).await {
            Ok(_) => {}
            Err(e) if unknown_command(&e) => {
                return Err(LockError::IncompatibleServer {
                    server: named(),
                    missing: "`WAIT`, which `replica_ack` needs".into(),
                    fix: "build the client without `replica_ack` (ElastiCache Serverless, for one, has no `WAIT`)",
                    source: Some(e),
                });
            }
            Err(e) => return Err(LockError::backend("replica acknowledgement", e)),
        }
    }
    if let Some(server) = &server {
        tracing::debug!(%server, "lock client's server");
    }
    Ok(server)
}

/// `HELLO`, else `INFO server`; `None` when the server (or a proxy in front of it) answers
/// neither.
async fn identify(conn: &mut impl ConnectionLike) -> Result<Option<ServerInfo>, LockError> {
    match redis::cmd("HELLO").query_async::<Value>(conn).await {
        Ok(reply) => return Ok(ServerInfo::from_hello(&reply)),
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError) => {}
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => {}
        Err(e) => return Err(LockError::backend("connect", e)),
    }
    match redis::cmd("INFO")
        .arg("server")
        .query_async::<String>(conn)
        .await
    {
        Ok(info) => Ok(ServerInfo::from_info(&info)),
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::ResponseError) => Ok(None),
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm) => Ok(None),
        Err(e) => Err(LockError::backend("connect", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn hello_names_the_server_and_its_own_version() {
        let resp2 = Value::Array(
            ["server", "valkey", "version", "9.1.2", "proto", "2"]
                .iter()
                .map(|s| bulk(s))
                .collect(),
        );
        let valkey = ServerInfo::from_hello(&resp2).unwrap();
        assert_eq!(valkey.to_string(), "Valkey 9.1.2");
        assert!(valkey.is_valkey());
        assert_eq!(valkey.version_numbers(), Some((9, 1, 2)));

        let resp3 = Value::Map(vec![
            (bulk("server"), bulk("redis")),
            (bulk("version"), bulk("8.2.3")),
        ]);
        let redis = ServerInfo::from_hello(&resp3).unwrap();
        assert_eq!(redis.to_string(), "Redis 8.2.3");
        assert!(!redis.is_valkey());
        assert_eq!(ServerInfo::from_hello(&Value::Nil), None);
        assert_eq!(ServerInfo::from_hello(&Value::Array(vec![bulk("x")])), None);
    }

    #[test]
    fn info_names_valkey_by_server_name_not_redis_version() {
        let valkey = ServerInfo::from_info(
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.8\r\n",
        )
        .unwrap();
        assert_eq!(valkey.to_string(), "Valkey 8.1.8");
        let redis = ServerInfo::from_info("# Server\r\nredis_version:5.0.14\r\n").unwrap();
        assert_eq!(redis.to_string(), "Redis 5.0.14");
        assert_eq!(redis.version_numbers(), Some((5, 0, 14)));
        assert_eq!(ServerInfo::from_info("garbage"), None);
    }

    #[test]
    fn odd_versions_parse_as_far_as_they_go() {
        let v = |version: &str| ServerInfo {
            name: "redis".into(),
            version: version.into(),
        };
        assert_eq!(v("7.4").version_numbers(), Some((7, 4, 0)));
        assert_eq!(v("255.255.255").version_numbers(), Some((255, 255, 255)));
        assert_eq!(v("8.2.3-rc1").version_numbers(), Some((8, 2, 3)));
        assert_eq!(v("").version_numbers(), None);
        assert_eq!(v("x.1").version_numbers(), None);
        assert_eq!(v("").to_string(), "Redis");
    }
}
