//! Which master a Sentinel client used when: lock-runtime's events "Sentinel named the master"
//! (`master`) and "Sentinel failed over to a new master; switched connections" (`new`), one
//! line each, `<mono-ns> <host:port>`, appended to a file (the failover suite attributes each
//! grant to the master its client used at the time: `chaos::attribute_masters`). Every event of
//! the Sentinel client (trace level and up: each look at the sentinels, each confirmation) goes
//! to `<file>.events`, `<mono-ns> <level> <message> <field>=<value>…`, kept with the records
//! when the suite fails: what the client saw when it switched late.

use std::io::Write;
use std::sync::Mutex;

use lock_tests::mono_ns;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

struct Masters {
    out: Mutex<std::fs::File>,
    events: Mutex<std::fs::File>,
}

#[derive(Default)]
struct Fields {
    message: String,
    master: Option<String>,
    /// Every field but the message, `name=value`.
    all: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        match field.name() {
            "message" => self.message = text,
            name => {
                if matches!(name, "master" | "new") {
                    self.master = Some(text.clone());
                }
                self.all.push_str(&format!(" {name}={text}"));
            }
        }
    }
}

impl Subscriber for Masters {
    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        meta.target().starts_with("lock_runtime::topology")
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        {
            let mut events = self.events.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(
                events,
                "{} {} {}{}",
                mono_ns(),
                event.metadata().level(),
                fields.message,
                fields.all
            );
        }
        let named = fields.message.contains("Sentinel named the master")
            || fields.message.contains("switched connections");
        if let (true, Some(master)) = (named, fields.master) {
            let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(out, "{} {master}", mono_ns());
            let _ = out.flush();
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// Appends the client's master to `path` from now on.
pub(super) fn record_to(path: &str) {
    let open = |path: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("masters file")
    };
    let _ = tracing::subscriber::set_global_default(Masters {
        out: Mutex::new(open(path)),
        events: Mutex::new(open(&format!("{path}.events"))),
    });
}
