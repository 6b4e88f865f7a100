//! Per-pod HTTP limits: the annotation `wasm9p.io/http`, within the node's bounds.
//!
//! ```text
//! wasm9p.io/http: max-instances=8,queue=16,timeout=10s,memory=64M
//! ```
//!
//! Each key is optional; what a pod does not say, the node's `http_limits` says (in
//! the same form, in `shim.toml`), and what neither says is `wasm9p http`'s default
//! (64 instances, a queue of 1024, 30 s, 256 MiB):
//! - `max-instances=N`: instances at once (1 and up);
//! - `queue=N`: requests that may wait for one (0: none wait, a 503 at once);
//! - `timeout=TIME`: from a request's arrival to the end of its instance (`10s`,
//!   `500ms`, `2m`; a plain number is seconds);
//! - `memory=SIZE`: each memory of an instance (`64M`, `1G`; at least 128K). The
//!   container's own memory limit bounds it too: the smaller wins.
//!
//! The node's `http_limits_max` (the same form) bounds what a pod may ask: a value
//! past it, a key this does not know, a malformed value or a key said twice fails the
//! container's create with one line naming the annotation. The defaults bound it at
//! 256 instances, a queue of 4096, 5 minutes and 1 GiB.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasm9p_guest_fs::mount_options::{parse_bytes, parse_duration};
use wasm9p_host::http::{HttpLimits, MAX_INSTANCES, MAX_MEMORY, MIN_MEMORY};

/// The annotation a pod (or a container) sets its HTTP limits with.
pub const ANNOTATION: &str = "wasm9p.io/http";

/// Limits as the annotation and `shim.toml` write them; `None`: not said.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpSettings {
    /// `max-instances`.
    pub max_instances: Option<usize>,
    /// `queue`.
    pub queue: Option<usize>,
    /// `timeout`, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// `memory`, in bytes.
    pub memory: Option<u64>,
}

impl HttpSettings {
    /// The bounds a node sets when its `shim.toml` does not say.
    pub fn default_max() -> HttpSettings {
        HttpSettings {
            max_instances: Some(256),
            queue: Some(4096),
            timeout_ms: Some(300_000),
            memory: Some(1 << 30),
        }
    }

    /// Parses `key=value,...` (empty: nothing said); the error is one line.
    pub fn parse(text: &str) -> Result<HttpSettings, String> {
        let mut settings = HttpSettings::default();
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?} is not KEY=VALUE"))?;
            let bad = |what: &str| format!("{key}={value:?}: expected {what}");
            let said = match key {
                "max-instances" => set(
                    &mut settings.max_instances,
                    value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_INSTANCES).contains(n))
                        .ok_or_else(|| bad(&format!("a number from 1 to {MAX_INSTANCES}")))?,
                ),
                "queue" => set(
                    &mut settings.queue,
                    value.parse().map_err(|_| bad("a number"))?,
                ),
                "timeout" => set(
                    &mut settings.timeout_ms,
                    parse_duration(value)
                        .filter(|d| !d.is_zero())
                        .map(|d| d.as_millis() as u64)
                        .ok_or_else(|| bad("a time above 0 (10s, 500ms, 2m)"))?,
                ),
                "memory" => set(
                    &mut settings.memory,
                    parse_bytes(value)
                        .filter(|n| (MIN_MEMORY as u64..=MAX_MEMORY as u64).contains(n))
                        .ok_or_else(|| bad("a size from 128K to 4G (64M, 1G)"))?,
                ),
                other => {
                    return Err(format!(
                        "unknown key {other:?} (max-instances, queue, timeout, memory)"
                    ))
                }
            };
            if !said {
                return Err(format!("{key} is said twice"));
            }
        }
        Ok(settings)
    }

    /// These settings, and `under`'s where these say nothing.
    pub fn over(&self, under: &HttpSettings) -> HttpSettings {
        HttpSettings {
            max_instances: self.max_instances.or(under.max_instances),
            queue: self.queue.or(under.queue),
            timeout_ms: self.timeout_ms.or(under.timeout_ms),
            memory: self.memory.or(under.memory),
        }
    }

    /// Whether each value said is at most `max`'s (where `max` says one); the error
    /// names the first that is not.
    pub fn within(&self, max: &HttpSettings) -> Result<(), String> {
        let past =
            |name: &str, ours: Option<u64>, bound: Option<u64>, shown: &dyn Fn(u64) -> String| {
                match (ours, bound) {
                    (Some(ours), Some(bound)) if ours > bound => Err(format!(
                        "{name}={} is past the node's bound, {}",
                        shown(ours),
                        shown(bound)
                    )),
                    _ => Ok(()),
                }
            };
        let number = |n: u64| n.to_string();
        let count = |n: Option<usize>| n.map(|n| n as u64);
        past(
            "max-instances",
            count(self.max_instances),
            count(max.max_instances),
            &number,
        )?;
        past("queue", count(self.queue), count(max.queue), &number)?;
        past("timeout", self.timeout_ms, max.timeout_ms, &show_millis)?;
        past("memory", self.memory, max.memory, &show_bytes)
    }

    /// `limits` with these settings applied, the memory bounded by `memory_bound`
    /// too (the container's).
    pub fn apply(&self, mut limits: HttpLimits, memory_bound: Option<usize>) -> HttpLimits {
        if let Some(n) = self.max_instances {
            limits.max_instances = n;
        }
        if let Some(n) = self.queue {
            limits.queue = n;
        }
        if let Some(ms) = self.timeout_ms {
            limits.timeout = Duration::from_millis(ms);
        }
        limits.memory = match (self.memory.map(|n| n as usize), memory_bound) {
            (Some(asked), Some(bound)) => Some(asked.min(bound)),
            (Some(asked), None) => Some(asked),
            // Not said: the container's bound, as before there were settings.
            (None, bound) => bound.or(limits.memory),
        };
        limits
    }
}

/// Sets `slot` unless it was set already; whether it was free.
fn set<T>(slot: &mut Option<T>, value: T) -> bool {
    let free = slot.is_none();
    if free {
        *slot = Some(value);
    }
    free
}

fn show_millis(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn show_bytes(n: u64) -> String {
    match n {
        n if n.is_multiple_of(1 << 30) => format!("{}G", n >> 30),
        n if n.is_multiple_of(1 << 20) => format!("{}M", n >> 20),
        n if n.is_multiple_of(1 << 10) => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

/// The limits as the annotation writes them (`max-instances=8,queue=16,...`): what
/// the HTTP task's "serving" line shows it serves with.
pub struct Shown<'a>(pub &'a HttpLimits);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limits = self.0;
        write!(
            f,
            "max-instances={},queue={},timeout={}",
            limits.max_instances,
            limits.queue,
            show_millis(limits.timeout.as_millis() as u64)
        )?;
        match limits.memory {
            Some(memory) => write!(f, ",memory={}", show_bytes(memory as u64)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_parses_and_overrides_the_node_and_the_defaults() {
        let pod = HttpSettings::parse("max-instances=8, queue=16,timeout=10s,memory=64M").unwrap();
        assert_eq!(
            pod,
            HttpSettings {
                max_instances: Some(8),
                queue: Some(16),
                timeout_ms: Some(10_000),
                memory: Some(64 << 20),
            }
        );
        assert_eq!(HttpSettings::parse("").unwrap(), HttpSettings::default());
        let node = HttpSettings::parse("queue=0,timeout=500ms").unwrap();
        let pod = HttpSettings::parse("max-instances=2").unwrap();
        let limits = pod.over(&node).apply(HttpLimits::default(), None);
        assert_eq!(
            (
                limits.max_instances,
                limits.queue,
                limits.timeout,
                limits.memory
            ),
            (
                2,
                0,
                Duration::from_millis(500),
                HttpLimits::default().memory
            )
        );
        assert_eq!(
            Shown(&limits).to_string(),
            "max-instances=2,queue=0,timeout=500ms,memory=256M"
        );
        // The container's limit bounds the memory a pod asks.
        let big = HttpSettings::parse("memory=1G").unwrap();
        assert_eq!(
            big.apply(HttpLimits::default(), Some(64 << 20)).memory,
            Some(64 << 20)
        );
        let small = HttpSettings::parse("memory=1M").unwrap();
        assert_eq!(
            small.apply(HttpLimits::default(), Some(64 << 20)).memory,
            Some(1 << 20)
        );
        for bound in [64 << 20, 1 << 30] {
            assert_eq!(
                HttpSettings::default()
                    .apply(HttpLimits::default(), Some(bound))
                    .memory,
                Some(bound)
            );
        }
    }

    #[test]
    fn a_bad_or_excessive_annotation_is_one_line() {
        for (text, needle) in [
            (
                "max-instances=0",
                "max-instances=\"0\": expected a number from 1",
            ),
            ("max-instances=lots", "expected a number from 1"),
            ("queue=-1", "queue=\"-1\": expected a number"),
            ("timeout=0s", "expected a time above 0"),
            ("timeout=soon", "expected a time above 0"),
            ("memory=1K", "expected a size from 128K"),
            ("memory=8G", "expected a size from 128K"),
            ("colour=blue", "unknown key \"colour\""),
            ("queue", "\"queue\" is not KEY=VALUE"),
            ("queue=1,queue=2", "queue is said twice"),
        ] {
            let err = HttpSettings::parse(text).unwrap_err();
            assert!(err.contains(needle) && !err.contains('\n'), "{text}: {err}");
        }
        let max = HttpSettings::default_max();
        for (text, needle) in [
            (
                "max-instances=257",
                "max-instances=257 is past the node's bound, 256",
            ),
            ("queue=5000", "queue=5000 is past the node's bound, 4096"),
            ("timeout=6m", "timeout=360s is past the node's bound, 300s"),
            ("memory=2G", "memory=2G is past the node's bound, 1G"),
        ] {
            let err = HttpSettings::parse(text).unwrap().within(&max).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
        let fits = HttpSettings::parse("max-instances=256,queue=4096,timeout=5m,memory=1G");
        assert_eq!(fits.unwrap().within(&max), Ok(()));
    }
}
