//! What a handler counts, in the Prometheus text format (`prometheus-client`), for a
//! scraper: [`super::HttpHandler::metrics_text`], served by `wasm9p http
//! --metrics-listen` ([`super::serve_metrics`]).
//!
//! Each figure has one home: what the handler already counts for `--stats` (requests
//! by how they ended, instances, the admission's queue, the mounts' messages and
//! caches) is read from there at each scrape ([`Scrape`]); only what `--stats` has no
//! use for is kept here (responses by status, the latency histogram, connections,
//! reloads).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `wasm9p_http_requests` | counter | |
//! | `wasm9p_http_responses` | counter | `status` |
//! | `wasm9p_http_request_duration_seconds` | histogram | |
//! | `wasm9p_http_limit_hits` | counter | `limit`: `busy`, `timeout`, `memory`, `body`, `slow_body`, `trap`, `bad_request` |
//! | `wasm9p_http_instances_in_flight`, `_queued` | gauge | |
//! | `wasm9p_http_instances_made` | counter | |
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
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::admission::Admission;
use super::instance::InstanceCounts;
use super::Counts;
use crate::mounts::MountTable;

/// The `Content-Type` of [`super::HttpHandler::metrics_text`].
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The figures kept here, and the registry that prints them with the scraped ones.
pub(crate) struct Metrics {
    registry: Registry,
    responses: Family<Vec<(&'static str, String)>, Counter>,
    latency: Histogram,
    pub(crate) connections: Gauge,
    reloads: Family<Vec<(&'static str, &'static str)>, Counter>,
}

impl Metrics {
    pub(crate) fn new(scrape: Scrape) -> Metrics {
        let mut registry = Registry::with_prefix("wasm9p");
        let responses = Family::default();
        // From half a millisecond to about 33 s.
        let latency = Histogram::new(exponential_buckets(0.0005, 2.0, 17));
        let connections = Gauge::default();
        let reloads = Family::default();
        registry.register(
            "http_responses",
            "Responses sent, by status",
            responses.clone(),
        );
        registry.register_with_unit(
            "http_request_duration",
            "Time from a request's arrival to its response's head",
            prometheus_client::registry::Unit::Seconds,
            latency.clone(),
        );
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
            responses,
            latency,
            connections,
            reloads,
        }
    }

    /// One response sent with `status`, `took` after its request arrived.
    pub(crate) fn responded(&self, status: u16, took: Duration) {
        self.responses
            .get_or_create(&vec![("status", status.to_string())])
            .inc();
        self.latency.observe(took.as_secs_f64());
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
