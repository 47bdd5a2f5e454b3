//! The `dst` command's log: a small tracing subscriber that prints every
//! event at or above a level, stamped with the simulated time and the
//! host it ran on, so the library's own account of a run (each attempt,
//! each fallback, each undetermined outcome) reads beside its history.
//! Like the run, the log is the same on every run of a seed.

use std::fmt::{self, Write as _};
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Prints the events of tikv-plan, tikv-sim and the chaos suite at or
/// above `level`, and other crates' (h2, hyper) warnings and errors, to
/// standard error.
pub struct SimLog {
    level: Level,
}

impl SimLog {
    /// A log of the events at or above `level`.
    pub fn new(level: Level) -> Self {
        SimLog { level }
    }

    /// The level `name` names (`error`, `warn`, `info`, `debug`, `trace`).
    pub fn level(name: &str) -> Option<Level> {
        name.parse().ok()
    }
}

/// Writes an event's fields: the message first, then `name=value` pairs.
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl Subscriber for SimLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        let level = if metadata.target().starts_with("tikv_") {
            self.level
        } else {
            Level::WARN.min(self.level)
        };
        metadata.is_event() && *metadata.level() <= level
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let at = turmoil::sim_elapsed().unwrap_or_default();
        let metadata = event.metadata();
        // The tokio task an event ran on, so one call's events can be
        // picked out of many tasks' (`t-` outside a task).
        let task = tokio::task::try_id().map_or_else(|| "-".to_string(), |id| id.to_string());
        let mut line = Line(format!(
            "[{:>10}µs {:5} t{task} {}]",
            at.as_micros(),
            metadata.level(),
            metadata.target()
        ));
        event.record(&mut line);
        let _ = writeln!(std::io::stderr().lock(), "{}", line.0);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}
