//! What a handler counts, in the Prometheus text format (`prometheus-client`), for a
//! scraper: [`super::HttpHandler::metrics_text`], served by `wasm9p http
//! --metrics-listen` ([`super::serve_metrics`]).
//!
//! Each figure has one home: what the handler counts as requests end (`super::Counts`:
//! by how they ended, by status, their latency in [`Latency`]), its instances, its
//! admission's queue and its mounts' messages and caches are read from there at each
//! scrape ([`Scrape`]); only connections and reloads are metrics of the registry's own.
//! Nothing on a request's way takes a lock or allocates for the metrics: a response
//! is two atomic additions and a bucket's.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wasm9p_http_requests` | counter | |
//! | `wasm9p_http_responses` | counter | `status` |
//! | `wasm9p_http_request_duration_seconds` | histogram | |
//! | `wasm9p_http_limit_hits` | counter | `limit`: `busy`, `timeout`, `memory`, `body`, `slow_body`, `trap`, `bad_request` |
//! | `wasm9p_http_instances_in_flight`, `_queued` | gauge | |
//! | `wasm9p_http_instances_made`, `_reused` | counter | |
//! | `wasm9p_http_instances_idle` | gauge | |
//! | `wasm9p_http_connections_open` | gauge | |
//! | `wasm9p_http_reloads` | counter | `result`: `ok`, `failed` |
//! | `wasm9p_mount_messages` | counter | `mount` |
//! | `wasm9p_mount_cache_hits`, `_misses` | counter | `mount`, `cache` |

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::admission::Admission;
use super::instance::InstanceCounts;
use super::reuse::ReuseCounts;
use super::Counts;
use crate::mounts::MountTable;

/// The `Content-Type` of [`super::HttpHandler::metrics_text`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The latency histogram's upper bounds, in seconds: from half a millisecond, doubling,
/// to about 33 s (and +Inf past them).
const LATENCY_BOUNDS: [f64; 17] = {
    let mut bounds = [0.0005; 17];
    let mut i = 1;
    while i < bounds.len() {
        bounds[i] = bounds[i - 1] * 2.0;
        i += 1;
    }
    bounds
};

/// A latency histogram of atomics: a count per bucket (the last one past every
/// bound), and the sum.
#[derive(Default)]
pub(crate) struct Latency {
    buckets: [AtomicU64; LATENCY_BOUNDS.len() + 1],
    sum_ns: AtomicU64,
}

impl Latency {
    pub(crate) fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let bucket = LATENCY_BOUNDS.partition_point(|bound| *bound < secs);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }
}

/// Responses by status, 100 to 599.
pub(crate) struct ByStatus([AtomicU64; 500]);

impl Default for ByStatus {
    fn default() -> ByStatus {
        ByStatus(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl ByStatus {
    /// Every response counted.
    pub(crate) fn total(&self) -> u64 {
        self.0.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    pub(crate) fn count(&self, status: u16) {
        let at = usize::from(status.clamp(100, 599) - 100);
        self.0[at].fetch_add(1, Ordering::Relaxed);
    }
}

/// The registry's own figures, and the registry that prints them with the scraped
/// ones.
pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) connections: Gauge,
    reloads: Family<Vec<(&'static str, &'static str)>, Counter>,
}

impl Metrics {
    pub(crate) fn new(scrape: Scrape) -> Metrics {
        let mut registry = Registry::with_prefix("wasm9p");
        let connections = Gauge::default();
        let reloads = Family::default();
        registry.register(
            "http_connections_open",
            "Connections open now",
            connections.clone(),
        );
        registry.register(
            "http_reloads",
            "Component reloads, by result",
            reloads.clone(),
        );
        registry.register_collector(Box::new(scrape));
        Metrics {
            registry,
            connections,
            reloads,
        }
    }

    /// A reload, done or not.
    pub(crate) fn reloaded(&self, ok: bool) {
        let result = if ok { "ok" } else { "failed" };
        self.reloads.get_or_create(&vec![("result", result)]).inc();
    }

    /// Everything, in the Prometheus text format.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry).is_err() {
            let _ = writeln!(out, "# the metrics could not be encoded");
        }
        out
    }
}

/// What is read from the handler's own counts at each scrape.
pub(crate) struct Scrape {
    pub(crate) counts: Arc<Counts>,
    pub(crate) instances: Arc<InstanceCounts>,
    pub(crate) reuses: Arc<ReuseCounts>,
    pub(crate) admission: Arc<Admission>,
    pub(crate) mounts: Arc<MountTable>,
}

impl std::fmt::Debug for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scrape")
    }
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: usize,
) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// A counter with one series per label set.
fn counter_family<'a>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (Vec<(&'a str, String)>, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut metric =
        encoder.encode_descriptor(name, help, None, ConstCounter::new(0u64).metric_type())?;
    for (labels, value) in series {
        ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counts;
        counter(
            &mut encoder,
            "http_requests",
            "Requests received",
            n(&c.requests),
        )?;
        counter_family(
            &mut encoder,
            "http_responses",
            "Responses sent, by status",
            c.by_status.0.iter().enumerate().filter_map(|(at, count)| {
                let count = n(count);
                (count > 0).then(|| (vec![("status", (at + 100).to_string())], count))
            }),
        )?;
        let latency = &c.latency;
        let counts: Vec<u64> = latency.buckets.iter().map(n).collect();
        let buckets: Vec<(f64, u64)> = LATENCY_BOUNDS
            .iter()
            .copied()
            .chain([f64::INFINITY])
            .zip(counts.iter().copied())
            .collect();
        encoder
            .encode_descriptor(
                "http_request_duration",
                "Time from a request's arrival to its response's head",
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                n(&latency.sum_ns) as f64 / 1e9,
                counts.iter().sum(),
                &buckets,
                None,
            )?;
        let limits = [
            ("busy", n(&c.busy)),
            ("timeout", n(&c.timeouts)),
            ("memory", n(&c.memory_limit)),
            ("body", n(&c.body_too_large)),
            ("slow_body", n(&c.slow_bodies)),
            ("trap", n(&c.traps)),
            ("bad_request", n(&c.bad_request)),
        ];
        counter_family(
            &mut encoder,
            "http_limit_hits",
            "Requests answered by a limit (or a guest's failure) instead of the guest",
            limits.map(|(limit, v)| (vec![("limit", limit.to_owned())], v)),
        )?;
        gauge(
            &mut encoder,
            "http_instances_in_flight",
            "Instances running now",
            self.admission.in_flight(),
        )?;
        gauge(
            &mut encoder,
            "http_instances_queued",
            "Requests waiting for an instance now",
            self.admission.queued(),
        )?;
        counter(
            &mut encoder,
            "http_instances_made",
            "Instances made",
            n(&self.instances.made),
        )?;
        counter(
            &mut encoder,
            "http_instances_reused",
            "Requests served by an instance that had served one before",
            n(&self.reuses.reused),
        )?;
        gauge(
            &mut encoder,
            "http_instances_idle",
            "Instances kept for the next request now",
            usize::try_from(n(&self.reuses.idle)).unwrap_or(usize::MAX),
        )?;
        let mounted: Vec<_> = self
            .mounts
            .mounted()
            .iter()
            .filter_map(|m| Some((m.spec.target.clone(), m.stats()?)))
            .collect();
        counter_family(
            &mut encoder,
            "mount_messages",
            "9P requests a mount sent",
            mounted
                .iter()
                .map(|(target, s)| (vec![("mount", target.clone())], s.rpc_total)),
        )?;
        let by_cache = |hits: bool| {
            mounted.iter().flat_map(move |(target, s)| {
                let c = &s.cache;
                let rows: Vec<(&str, u64)> = if hits {
                    vec![
                        ("dentry", c.dentry_hits),
                        ("negative", c.negative_hits),
                        ("listing", c.listing_hits),
                        ("attr", c.attr_hits),
                        ("symlink", c.symlink_hits),
                        ("page", c.page_hits),
                        ("persistent", c.persistent_hits),
                    ]
                } else {
                    vec![
                        ("dentry", c.dentry_misses),
                        ("attr", c.attr_misses),
                        ("symlink", c.symlink_misses),
                        ("page", c.page_misses),
                        ("persistent", c.persistent_misses),
                    ]
                };
                rows.into_iter().map(move |(cache, v)| {
                    (
                        vec![("mount", target.clone()), ("cache", cache.to_owned())],
                        v,
                    )
                })
            })
        };
        counter_family(
            &mut encoder,
            "mount_cache_hits",
            "Answers a mount's caches gave with no request",
            by_cache(true),
        )?;
        counter_family(
            &mut encoder,
            "mount_cache_misses",
            "Answers a mount's caches did not have",
            by_cache(false),
        )?;
        Ok(())
    }
}
