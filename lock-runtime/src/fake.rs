//! A scripted stand-in for Redis, for unit tests of the state machines (watchdog, demux, wait
//! loop) under tokio's paused time, where a real server cannot make a timing corner happen: a
//! node that hangs for exactly as long as a test needs, a subscription that never confirms.
//!
//! Every command goes to the test's handler as a [`Call`]; the handler may sleep (a hang),
//! fail, or answer with RESP text. Pipelines are answered command by command. Pub/sub
//! (un)subscriptions go to a second handler; pushes are delivered through the demux's router.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::script;
use crate::sync;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Handler = Arc<dyn Fn(Call) -> BoxFuture<RedisResult<Value>> + Send + Sync>;
type SubscribeHandler = Arc<dyn Fn(Vec<String>, bool) -> BoxFuture<RedisResult<()>> + Send + Sync>;

/// One command as the fake saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Call {
    /// The command's arguments, the command name first.
    pub(crate) args: Vec<String>,
}

impl Call {
    /// Which of our scripts an `EVALSHA` runs: `acquire`, `release`, `renew`, `force_unlock`,
    /// `inspect`; otherwise the command name in lower case.
    pub(crate) fn script(&self) -> String {
        if self
            .args
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case("EVALSHA"))
        {
            let sha = self.args.get(1).map(String::as_str).unwrap_or_default();
            let known = [
                ("acquire", script::ACQUIRE.get_hash()),
                ("renew", script::RENEW.get_hash()),
                ("inspect", script::INSPECT.get_hash()),
            ];
            for (name, hash) in known {
                if sha == hash {
                    return name.into();
                }
            }
            for publishing in [script::Publishing::CLASSIC, script::Publishing::SHARDED] {
                if sha == publishing.acquire.get_hash() {
                    return "acquire".into();
                }
                if sha == publishing.release.get_hash() {
                    return "release".into();
                }
                if sha == publishing.force_unlock.get_hash() {
                    return "force_unlock".into();
                }
            }
            return "unknown script".into();
        }
        self.args
            .first()
            .map(|c| c.to_lowercase())
            .unwrap_or_default()
    }

    /// A plain first attempt (`SET key owner NX PX lease GET`) as the acquire script call it
    /// stands for: `EVALSHA <acquire> 1 key owner lease`.
    fn as_script_acquire(&self) -> Option<Call> {
        match &self.args[..] {
            [set, key, owner, nx, px, lease, get]
                if set.eq_ignore_ascii_case("SET") && nx == "NX" && px == "PX" && get == "GET" =>
            {
                let args = [
                    "EVALSHA",
                    script::ACQUIRE.get_hash(),
                    "1",
                    key,
                    owner,
                    lease,
                ];
                Some(Call {
                    args: args.map(String::from).to_vec(),
                })
            }
            _ => None,
        }
    }

    /// The keys of an `EVALSHA`.
    pub(crate) fn keys(&self) -> &[String] {
        let n: usize = self.args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
        self.args.get(3..3 + n).unwrap_or(&[])
    }

    /// The arguments of an `EVALSHA` after its keys.
    pub(crate) fn argv(&self) -> &[String] {
        let n = self.keys().len();
        self.args.get(3 + n..).unwrap_or(&[])
    }
}

/// A value from RESP text, e.g. `"*2\r\n:1\r\n:42\r\n"` or `"-CROSSSLOT …\r\n"`.
pub(crate) fn resp(text: &str) -> Value {
    redis::parse_redis_value(text.as_bytes()).expect("valid RESP in a test")
}

/// A script's `{code, n}` reply.
pub(crate) fn reply(code: i64, n: i64) -> Value {
    resp(&format!("*2\r\n:{code}\r\n:{n}\r\n"))
}

/// The fake connection; clones share the handlers and the call log.
#[derive(Clone)]
pub(crate) struct FakeRedis {
    handler: Handler,
    subscriber: SubscribeHandler,
    log: Arc<Mutex<Vec<Call>>>,
}

impl FakeRedis {
    /// Answers every command with `handler`; (un)subscriptions succeed at once.
    pub(crate) fn new<F, Fut>(handler: F) -> FakeRedis
    where
        F: Fn(Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = RedisResult<Value>> + Send + 'static,
    {
        FakeRedis {
            handler: Arc::new(move |call| Box::pin(handler(call))),
            subscriber: Arc::new(|_, _| Box::pin(async { Ok(()) })),
            log: Arc::default(),
        }
    }

    /// Answers `SUBSCRIBE` (`true`) and `UNSUBSCRIBE` (`false`) of these channels with `f`.
    pub(crate) fn on_subscribe<F, Fut>(mut self, f: F) -> FakeRedis
    where
        F: Fn(Vec<String>, bool) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = RedisResult<()>> + Send + 'static,
    {
        self.subscriber = Arc::new(move |channels, on| Box::pin(f(channels, on)));
        self
    }

    /// Every command received so far (pipelines command by command).
    pub(crate) fn calls(&self) -> Vec<Call> {
        sync::lock(&self.log).clone()
    }

    fn call(&self, cmd: &Cmd) -> BoxFuture<RedisResult<Value>> {
        let args = cmd
            .args_iter()
            .map(|a| match a {
                Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => String::new(),
            })
            .collect();
        let call = Call { args };
        if let Some(acquire) = call.as_script_acquire() {
            // A plain first attempt is logged and answered as the acquire script call it
            // stands for, the answer read back into what `SET NX PX GET` replies: tests script
            // one acquire, however it is sent.
            sync::lock(&self.log).push(acquire.clone());
            let reply = (self.handler)(acquire);
            return Box::pin(async move {
                let plain = match reply.await? {
                    Value::Array(pair) => match pair.first() {
                        Some(Value::Int(1)) => Value::Nil,
                        Some(Value::Int(0)) => Value::BulkString(b"0123abcd:1".to_vec()),
                        _ => Value::Array(pair),
                    },
                    other => other,
                };
                Ok(plain)
            });
        }
        sync::lock(&self.log).push(call.clone());
        (self.handler)(call)
    }

    pub(crate) async fn subscribe(&self, channels: &[String], on: bool) -> RedisResult<()> {
        (self.subscriber)(channels.to_vec(), on).await
    }
}

impl ConnectionLike for FakeRedis {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.call(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let calls: Vec<_> = pipeline.cmd_iter().map(|cmd| self.call(cmd)).collect();
        Box::pin(async move {
            let mut values = Vec::with_capacity(calls.len());
            for call in calls {
                values.push(call.await?);
            }
            Ok(values.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
