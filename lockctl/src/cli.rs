//! The command line: global connection options and the four commands.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// Inspect and operate the distributed locks of lock-runtime on Redis.
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, about, long_about = None)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connection: Connection,

    /// The key prefix the applications use (default `lock`; also `LOCKCTL_PREFIX`).
    #[arg(long, global = true, value_name = "PREFIX")]
    pub(crate) prefix: Option<String>,

    /// The locks are Redisson's (applications built with `Layout::Redisson`): `inspect` and
    /// `force-unlock` take the name Java services use; `list` and `top`, which scan under a
    /// prefix, are refused.
    #[arg(long, global = true, conflicts_with = "prefix")]
    pub(crate) redisson: bool,

    /// Print JSON for scripts: one document per command (for `top`, one per refresh, one a
    /// line).
    #[arg(long, global = true)]
    pub(crate) json: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where Redis is.
#[derive(Debug, Args)]
pub(crate) struct Connection {
    /// One server: `redis://[user:password@]host:port/db`, `rediss://…` for TLS (default
    /// `redis://127.0.0.1:6379`; also `LOCKCTL_URL`, then `REDIS_URL`).
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) url: Option<String>,

    /// A Redis Cluster, from seed node URLs (repeat the option or separate them with commas).
    #[arg(
        long,
        global = true,
        value_name = "SEED",
        value_delimiter = ',',
        conflicts_with = "url"
    )]
    pub(crate) cluster: Vec<String>,

    /// The master behind Sentinel, from sentinel URLs (repeat or separate with commas); needs
    /// `--master`.
    #[arg(
        long,
        global = true,
        value_name = "URL",
        value_delimiter = ',',
        conflicts_with_all = ["url", "cluster"]
    )]
    pub(crate) sentinel: Vec<String>,

    /// The name the sentinels monitor the master under.
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) master: Option<String>,

    /// The ACL user of the data nodes behind Sentinel (the sentinels' own go in their URLs).
    #[arg(long, global = true, value_name = "USER")]
    pub(crate) master_user: Option<String>,

    /// TLS to the data nodes behind Sentinel (verified with `--tls-ca` if given).
    #[arg(long, global = true, requires = "sentinel")]
    pub(crate) master_tls: bool,

    /// The password of the data nodes behind Sentinel (also `LOCKCTL_MASTER_PASSWORD`).
    #[arg(long, global = true, value_name = "PASSWORD")]
    pub(crate) master_password: Option<String>,

    /// Trust this PEM root certificate (a private CA) for `rediss://` URLs.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,

    /// How long to try to connect, and to wait for each reply.
    #[arg(long, global = true, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List the held locks: name, kind, holder(s), TTL, fencing token, waiters.
    List(Listing),
    /// Show everything about one lock.
    Inspect {
        /// The lock name (as the application gives it, without the prefix).
        name: String,
    },
    /// Delete a lock if the holders shown still hold it and wake its waiters; asks first
    /// unless `--yes`.
    ForceUnlock {
        /// The lock name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// A refreshing view of the busiest locks: most waiters first, then most re-granted.
    Top {
        #[command(flatten)]
        listing: Listing,
        /// Time between refreshes.
        #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
        interval: Duration,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long, value_name = "N")]
        iterations: Option<u64>,
        /// Rows shown per refresh.
        #[arg(long, value_name = "N", default_value_t = 20)]
        rows: usize,
    },
}

/// Which locks to look at.
#[derive(Debug, Args)]
pub(crate) struct Listing {
    /// Only lock names matching this glob (`*`, `?`, `[a-z]`, `\` escapes).
    #[arg(long, value_name = "GLOB", default_value = "*")]
    pub(crate) pattern: String,
    /// Look at no more than this many locks.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub(crate) limit: usize,
}

/// `250ms`, `1s`, `1.5s`, `2m`, `1h`, or a number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 500ms, 1s, 2m)"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}` (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| *d <= Duration::from_secs(24 * 3600))
        .ok_or_else(|| format!("`{text}` is out of range (0 to 24h)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("1x").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1000h").is_err());
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
