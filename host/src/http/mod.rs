//! Serverless: HTTP components served per request, each request in a fresh instance
//! (or, as the operator chooses, one reused), every instance on one shared, cached
//! namespace. A component is a `wasi:http/proxy`
//! of WASI 0.2 (it exports `wasi:http/incoming-handler@0.2.x`) or a WASI 0.3 service
//! (`wasi:http/handler@0.3.x`, async); `instance` runs either. Which one it is is read
//! from its exports before it is compiled ([`HandlerKind`]): a 0.2 proxy's engines go
//! without wasmtime's concurrency support, which only a 0.3 service uses, so that its
//! stores set none of it up and its calls pay for no task bookkeeping.
//!
//! [`HttpHandler`] is what `wasm9p http` serves and what a serverless runtime embeds:
//! one component, pre-instantiated once, and a [`MountTable`] that many handlers (many
//! components, many tenants) may share. [`HttpHandler::handle`] takes a hyper request
//! and gives its response; [`serve`] runs it on a listener of its own, with a graceful
//! stop.
//!
//! Per request, in order:
//! - **Admission** (`admission`): at most `max_instances` instances at once; past them
//!   a request waits, if fewer than `queue` wait already, until one is free or its
//!   deadline; otherwise 503.
//! - **The instance**: a fresh store on the engine of the tier the program has reached
//!   (baseline code until the optimized code is ready, `crate::engine`'s tiers), on
//!   wasmtime's pooling allocator, instantiated from the one pre-instance; or, when
//!   [`HttpLimits::reuse`] allows, one kept from a request before that ended cleanly
//!   (`reuse`). It runs on the task of the request's connection, with no hop to
//!   another thread (`instance`): what is left of the run once the guest answered goes
//!   with the response body, which drives it as hyper polls. The optimized tier's code
//!   checks bounds explicitly, so a pool slot is reset without a page-protection
//!   change (`crate::module_cache::Bounds`). It sees the
//!   table's namespace through our `wasi:filesystem`: the same preopens (resolved once,
//!   on the first request) for every request, and every request shares the mounts'
//!   caches; `ro` mounts stay read-only.
//! - **Limits**, each answered with a 5xx (4xx for the client's own body) and one line
//!   of text, the server going on:
//!   - memory per instance: our [`crate::limits::MemoryLimiter`], 500;
//!   - a timeout from the request's arrival: guest code is stopped by the epoch that
//!     one ticker thread advances for the whole process (`crate::interrupt`), and a
//!     guest waiting (on a 9P reply, a body) by a tokio timer; 504;
//!   - the request body: 413 past `max_request_body` (said up front by its length, or
//!     found as it streams);
//!   - the response body: 502 when its declared length is past `max_response_body`,
//!     else the stream is cut there (its head is already sent);
//!   - a trap, or a handler that returns without a response: 500.
//!   - a request body that stops coming (its guest left waiting for it) until the
//!     timeout: 408, the instance freed;
//! - **Outgoing HTTP** (`outgoing`): refused unless its host is allowed.
//!
//! Around the requests (`serve`, `connections`): HTTP/1.1 and HTTP/2 cleartext on one
//! port, at most `max_connections` open at once (past it the listener waits), a
//! request's head within `header_timeout`, an idle connection closed after
//! `idle_timeout`. [`HttpHandler::reload`] loads the component again (new requests go
//! to the new version once it is compiled, those in flight finish on theirs; one that
//! fails to load leaves the old serving). [`HttpHandler::metrics_text`] is everything
//! counted, in the Prometheus text format (`metrics`).

mod admission;
mod bodies;
mod connections;
mod instance;
mod kind;
mod metrics;
mod outgoing;
mod own_wakes;
mod proxy;
mod reuse;
mod serve;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body;
use hyper::{Request, Response, StatusCode};
use wasm9p_guest_fs::namespace::Location;

pub use bodies::{text_body, ResponseBody};
pub use connections::{default_max_connections, RESERVED_DESCRIPTORS};
pub use kind::HandlerKind;
pub use metrics::CONTENT_TYPE as METRICS_CONTENT_TYPE;
pub use outgoing::AllowedHost;
pub use reuse::{Reuse, MAX_USES};
pub use serve::{serve, serve_metrics, Listen, Listener};

use crate::engine::{loading_setters, Loading, ProgramSource, SetupError};
use crate::limits::MemoryLimitReached;
use crate::module_cache::{Bounds, Engines};
use crate::mounts::MountTable;
use crate::p2::WasiP2Fs;
use admission::{Admission, Refused};
use instance::First;
use proxy::{Setting, TimedOut};
use reuse::{Idle, Lease, ReuseCounts};

/// The most instances at once: each reserves address space for its memories in both
/// tiers' pools (4 GiB and a guard each, 4 memories an instance), and 2048 of them take
/// half of the 128 TiB a process has.
pub const MAX_INSTANCES: usize = 2048;

/// The largest memory limit: a 32-bit memory's whole range.
pub const MAX_MEMORY: usize = 4 << 30;

/// The smallest memory limit: two wasm pages, the least a C component (with the
/// preview1 adapter's memory beside its own) starts with.
pub const MIN_MEMORY: usize = 128 << 10;

/// The bounds every request is served within.
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// The most bytes each memory of an instance may take (`None`: wasmtime's own
    /// bound, 4 GiB).
    pub memory: Option<usize>,
    /// From a request's arrival to the end of its instance.
    pub timeout: Duration,
    /// The most bytes of a request body.
    pub max_request_body: u64,
    /// The most bytes of a response body.
    pub max_response_body: u64,
    /// Instances at once (at most [`MAX_INSTANCES`]).
    pub max_instances: usize,
    /// Requests that may wait for an instance.
    pub queue: usize,
    /// From the first byte of a request's head to its end; past it, the connection is
    /// closed ([`serve`]).
    pub header_timeout: Duration,
    /// How long a connection may go with no request in flight and no byte moving
    /// before it is closed ([`serve`]).
    pub idle_timeout: Duration,
    /// Connections open at once; past it, [`serve`] accepts no more until one closes.
    pub max_connections: usize,
    /// Whether an instance serves more than one request (default: no, a fresh one for
    /// each; see [`Reuse`] for what a reused instance sees).
    pub reuse: Reuse,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            memory: Some(256 << 20),
            timeout: Duration::from_secs(30),
            max_request_body: 16 << 20,
            max_response_body: 1 << 30,
            max_instances: 64,
            queue: 1024,
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            max_connections: default_max_connections(),
            reuse: Reuse::default(),
        }
    }
}

/// Makes an [`HttpHandler`] (see [`HttpHandler::builder`]).
pub struct HttpBuilder {
    loading: Loading,
    mounts: Arc<MountTable>,
    limits: HttpLimits,
    env: Vec<(String, String)>,
    allowed: Vec<AllowedHost>,
    ahead: HandlerKind,
}

impl HttpBuilder {
    loading_setters!("HttpHandler::finish", "");

    /// The bounds requests are served within (default: [`HttpLimits::default`]).
    pub fn limits(mut self, limits: HttpLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The environment every instance sees.
    pub fn env(mut self, env: &[(String, String)]) -> Self {
        self.env = env.to_vec();
        self
    }

    /// The handler of code compiled ahead
    /// ([`crate::engine::ProgramSource::CompiledAhead`]), which must have been compiled
    /// on [`engines`] of that kind (default: [`HandlerKind::Service`]). A file's is
    /// read from it.
    pub fn compiled_ahead_for(mut self, kind: HandlerKind) -> Self {
        self.ahead = kind;
        self
    }

    /// Hosts guests may send HTTP requests to (default: none).
    pub fn allow_outgoing(mut self, hosts: Vec<AllowedHost>) -> Self {
        self.allowed = hosts;
        self
    }

    /// Loads the component (through the module cache, on its tiers) and links it as a
    /// proxy; a failure is one line (a core module, no `wasi:http/incoming-handler`
    /// export, an import nothing provides).
    pub fn build(self) -> Result<HttpHandler, SetupError> {
        if !(1..=MAX_INSTANCES).contains(&self.limits.max_instances) {
            return Err(SetupError::Program(format!(
                "max_instances must be between 1 and {MAX_INSTANCES}"
            )));
        }
        if self.limits.memory.is_some_and(|m| m > MAX_MEMORY) {
            return Err(SetupError::Program(format!(
                "a memory limit past {MAX_MEMORY} bytes (a 32-bit memory's whole range) \
                 is no limit: leave it out"
            )));
        }
        if let Some(memory) = self.limits.memory.filter(|m| *m < MIN_MEMORY) {
            return Err(SetupError::Program(format!(
                "a memory limit of {memory} bytes is below the least a component can run in, \
                 {MIN_MEMORY} bytes (128K)"
            )));
        }
        if !(1..=MAX_USES).contains(&self.limits.reuse.uses) {
            return Err(SetupError::Program(format!(
                "reuse: an instance serves between 1 and {MAX_USES} requests"
            )));
        }
        if self.limits.reuse.idle.is_zero() {
            return Err(SetupError::Program(
                "reuse: the idle time must be longer than 0".into(),
            ));
        }
        if self.limits.max_connections == 0 {
            return Err(SetupError::Program(
                "max_connections must be at least 1".into(),
            ));
        }
        if let ProgramSource::File { path, .. } = &self.loading.program {
            not_wasm(path)?;
        }
        let loader = Loader::new(self.loading, &self.limits, self.ahead)?;
        let program = loader.load()?;
        let counts = Arc::new(Counts::default());
        let instances: Arc<instance::InstanceCounts> = Arc::default();
        let reuses: Arc<ReuseCounts> = Arc::default();
        let idle = self
            .limits
            .reuse
            .on()
            .then(|| Idle::new(self.limits.reuse, Arc::clone(&reuses)));
        let admission = Arc::new(Admission::new(self.limits.max_instances, self.limits.queue));
        let metrics = metrics::Metrics::new(metrics::Scrape {
            counts: Arc::clone(&counts),
            instances: Arc::clone(&instances),
            reuses: Arc::clone(&reuses),
            admission: Arc::clone(&admission),
            mounts: Arc::clone(&self.mounts),
        });
        Ok(HttpHandler {
            inner: Arc::new(Inner {
                admission,
                program: std::sync::Mutex::new(Arc::new(program)),
                loader,
                mounts: self.mounts,
                preopens: tokio::sync::OnceCell::new(),
                env: self.env,
                allowed: self.allowed.into(),
                limits: self.limits,
                counts,
                instances,
                idle,
                reuses,
                metrics,
                started: Instant::now(),
            }),
        })
    }
}

/// A file that is not wasm (a page of a site given by mistake) is refused in one line
/// naming it, before the text-format parser says something about parentheses. (A
/// `.wat` file, which wasmtime also takes, is let through.)
fn not_wasm(path: &std::path::Path) -> Result<(), SetupError> {
    use std::io::Read;
    if path.extension().is_some_and(|x| x == "wat") {
        return Ok(());
    }
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut magic));
    match read {
        Ok(4) if magic == *b"\0asm" => Ok(()),
        Ok(_) => Err(SetupError::Program(format!(
            "{}: not a wasm component (it does not start with \\0asm)",
            path.display()
        ))),
        // Not there, or unreadable: loading it says so.
        Err(_) => Ok(()),
    }
}

/// The kind of the component `program` gives as it is now: a file's read from it,
/// code compiled ahead's as its builder was told (`ahead`).
fn kind_of(program: &ProgramSource, ahead: HandlerKind) -> HandlerKind {
    match program {
        ProgramSource::File { path, .. } => HandlerKind::of_file(path),
        ProgramSource::CompiledAhead { .. } => ahead,
    }
}

/// How the component is loaded, at the start and at each reload.
struct Loader {
    loading: Loading,
    limits: HttpLimits,
    /// The kind of code compiled ahead (a file's is read from it at each load).
    ahead: HandlerKind,
    /// The engines of the kind loaded last: a reload of the same kind compiles on
    /// them again, one of the other kind makes its own.
    engines: std::sync::Mutex<(HandlerKind, Engines)>,
}

impl Loader {
    fn new(
        loading: Loading,
        limits: &HttpLimits,
        ahead: HandlerKind,
    ) -> Result<Loader, SetupError> {
        let kind = kind_of(&loading.program, ahead);
        Ok(Loader {
            loading,
            limits: limits.clone(),
            ahead,
            engines: std::sync::Mutex::new((kind, engines(limits, kind)?)),
        })
    }

    /// The engines for components of `kind`.
    fn engines_for(&self, kind: HandlerKind) -> Result<Engines, SetupError> {
        let mut current = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 != kind {
            *current = (kind, engines(&self.limits, kind)?);
        }
        Ok(current.1.clone())
    }

    fn load(&self) -> Result<crate::engine::TieredProgram<proxy::Linked>, SetupError> {
        let path = self.loading.program.path().to_owned();
        let engines = self.engines_for(kind_of(&self.loading.program, self.ahead))?;
        self.loading.load(
            (engines, true),
            Box::new(move |engine, program| proxy::link(engine, program, &path)),
        )
    }
}

/// The engines of the two tiers for components of `kind`: epoch interruption (the
/// timeout), the pooling allocator, sized for `max_instances` at once, and for a 0.2
/// proxy no concurrency support (see [`HandlerKind`]). Code compiled ahead for them
/// ([`crate::engine::ProgramSource::CompiledAhead`]) is compiled on the optimized one.
pub fn engines(limits: &HttpLimits, kind: HandlerKind) -> Result<Engines, SetupError> {
    let mut pool = wasmtime::PoolingAllocationConfig::new();
    let instances = u32::try_from(limits.max_instances).unwrap_or(u32::MAX);
    // A C component with the preview1 adapter has a handful of core instances, two
    // memories and a few tables; leave room for more.
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(16))
        .total_memories(instances.saturating_mul(4))
        .total_tables(instances.saturating_mul(8))
        .total_stacks(instances)
        // A slot given back is reset with memset up to these sizes (the memory a small
        // component touches), not with madvise, and what is decommitted goes in
        // batches: each madvise flushes every core's TLB, which under load cost more
        // than the requests themselves.
        .linear_memory_keep_resident(1 << 20)
        .table_keep_resident(64 << 10)
        .decommit_batch_size(16);
    if let Some(bytes) = limits.memory {
        // Our limiter refuses past the limit first (a typed trap); the pool's slots
        // need be no bigger, rounded up to whole pages.
        pool.max_memory_size(bytes.next_multiple_of(64 << 10));
    }
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    config.concurrency_support(kind == HandlerKind::Service);
    config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    // Requests instantiate and tear down all the time, and most grow their memory a
    // little: explicit bounds checks let the pool reset a slot without protection
    // changes (see `Bounds`).
    Engines::with_bounds(&config, Bounds::Explicit)
        .map_err(|e| SetupError::Runtime(format!("cannot make the engines: {e:#}")))
}

/// Requests served, by how they ended.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) requests: AtomicU64,
    pub(crate) busy: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) memory_limit: AtomicU64,
    pub(crate) traps: AtomicU64,
    pub(crate) body_too_large: AtomicU64,
    /// Request bodies that stopped coming: 408.
    pub(crate) slow_bodies: AtomicU64,
    pub(crate) bad_request: AtomicU64,
    /// Responses by status (their sum: the responses sent).
    pub(crate) by_status: metrics::ByStatus,
    /// From arrival to response head (for the metrics).
    pub(crate) latency: metrics::Latency,
}

/// An HTTP component (a 0.2 proxy or a 0.3 service) on a mount table, serving
/// requests (see the module docs). Cloning it is cheap: every clone serves from the
/// same instances' bounds and caches.
#[derive(Clone)]
pub struct HttpHandler {
    inner: Arc<Inner>,
}

struct Inner {
    /// The version new requests go to ([`HttpHandler::reload`] replaces it).
    program: std::sync::Mutex<Arc<crate::engine::TieredProgram<proxy::Linked>>>,
    loader: Loader,
    mounts: Arc<MountTable>,
    preopens: tokio::sync::OnceCell<Vec<(Location, String)>>,
    env: Vec<(String, String)>,
    allowed: Arc<[AllowedHost]>,
    limits: HttpLimits,
    admission: Arc<Admission>,
    counts: Arc<Counts>,
    instances: Arc<instance::InstanceCounts>,
    /// Instances kept between requests, when reuse is on.
    idle: Option<Arc<Idle>>,
    reuses: Arc<ReuseCounts>,
    metrics: metrics::Metrics,
    started: Instant,
}

impl Inner {
    /// The version new requests go to.
    fn program(&self) -> Arc<crate::engine::TieredProgram<proxy::Linked>> {
        Arc::clone(&self.program.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl HttpHandler {
    /// A handler for the component at `program` on `mounts` (see [`HttpBuilder`]).
    pub fn builder(program: impl Into<PathBuf>, mounts: Arc<MountTable>) -> HttpBuilder {
        Self::builder_for(ProgramSource::file(program), mounts)
    }

    /// A handler for the component `source` gives, on `mounts` (see [`HttpBuilder`]).
    pub fn builder_for(source: ProgramSource, mounts: Arc<MountTable>) -> HttpBuilder {
        HttpBuilder {
            loading: Loading::of(source),
            mounts,
            limits: HttpLimits::default(),
            env: Vec::new(),
            allowed: Vec::new(),
            ahead: HandlerKind::Service,
        }
    }

    /// The bounds it serves within.
    pub fn limits(&self) -> &HttpLimits {
        &self.inner.limits
    }

    /// Serves one request in a fresh instance: the guest's response, or one of ours
    /// saying in one line why there is none. Call it from a tokio runtime (hyper's
    /// `service_fn`, typically).
    pub async fn handle<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<wasmtime_wasi_http::Error>,
    {
        let inner = &self.inner;
        let arrived = Instant::now();
        inner.counts.requests.fetch_add(1, Ordering::Relaxed);
        let response = inner.respond(request).await;
        let counts = &inner.counts;
        counts.by_status.count(response.status().as_u16());
        counts.latency.observe(arrived.elapsed());
        response
    }

    /// Loads the component again, from where it was loaded (its file's bytes as they
    /// are now), through the module cache on its tiers: once compiled, new requests go
    /// to it, and requests in flight finish on the version they started on. One that
    /// fails to load leaves the version before serving; the error is one line. Blocks
    /// while it compiles: call it off the runtime (`spawn_blocking`).
    pub fn reload(&self) -> Result<(), SetupError> {
        let inner = &self.inner;
        let loaded = match &inner.loader.loading.program {
            ProgramSource::File { path, .. } => not_wasm(path),
            ProgramSource::CompiledAhead { .. } => Ok(()),
        }
        .and_then(|()| inner.loader.load());
        inner.metrics.reloaded(loaded.is_ok());
        let program = loaded?;
        *inner.program.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(program);
        Ok(())
    }

    /// Everything counted, in the Prometheus text format (content type
    /// [`METRICS_CONTENT_TYPE`]): see the module `metrics` for the names.
    pub fn metrics_text(&self) -> String {
        self.inner.metrics.text()
    }

    pub(crate) fn metrics(&self) -> &metrics::Metrics {
        &self.inner.metrics
    }

    /// The `--stats` JSON as of now: the mounts' (with `guests` the requests served),
    /// the program's tiers, and `http`: the requests by how they ended (`bodies_cut`:
    /// answered, then their body cut at the deadline; `trapped_after_answer`:
    /// answered, then a trap, the body cut there), the instances made and the mean
    /// time one took to make.
    pub fn stats_now(&self) -> serde_json::Value {
        let inner = &self.inner;
        let c = &inner.counts;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let wall_ms = inner.started.elapsed().as_millis() as u64;
        let responses = c.by_status.total();
        let mut stats = inner.mounts.stats_json(responses, wall_ms);
        stats["tier"] = inner.program().stats_json();
        stats["http"] = serde_json::json!({
            "requests": n(&c.requests),
            "responses": responses,
            "refused_busy": n(&c.busy),
            "timeouts": n(&c.timeouts),
            "memory_limit": n(&c.memory_limit),
            "traps": n(&c.traps),
            "body_too_large": n(&c.body_too_large),
            "slow_bodies": n(&c.slow_bodies),
            "bad_request": n(&c.bad_request),
            "bodies_cut": n(&inner.instances.bodies_cut),
            "instances": n(&inner.instances.made),
            "reused": n(&inner.reuses.reused),
            "idle_instances": n(&inner.reuses.idle),
            "finished_apart": n(&inner.instances.finished_apart),
            "trapped_after_answer": n(&inner.instances.trapped_after_answer),
            "instantiate_us_avg": n(&inner.instances.making_ns)
                .checked_div(n(&inner.instances.made))
                .map_or(0, |ns| ns / 1000),
            "in_flight": inner.admission.in_flight(),
            "queued": inner.admission.queued(),
        });
        stats
    }

    /// Waits for what the program still has to store, and hands an unfinished
    /// optimized compile on (see [`HttpBuilder::hand_off_compiles_to`]).
    pub fn finish(&self) {
        self.inner.program().finish(
            self.inner.loader.loading.hand_off_to.as_ref(),
            &self.inner.loader.loading.notes,
        );
    }
}

/// One of our own responses: `status` and one line of text.
fn ours(status: StatusCode, line: &str) -> Response<ResponseBody> {
    let mut response = Response::new(text_body(format!("{line}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A response, and whose it is.
enum Whose {
    /// The guest's.
    Guest(Response<ResponseBody>),
    /// One of ours, in its place.
    Ours(Response<ResponseBody>),
}

/// The length a message says its body has, if it says one that parses.
pub(crate) fn declared_length(headers: &hyper::HeaderMap) -> Option<u64> {
    headers
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

impl Inner {
    async fn respond<B>(&self, request: Request<B>) -> Response<ResponseBody>
    where
        B: Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<wasmtime_wasi_http::Error>,
    {
        let limits = &self.limits;
        let deadline = Instant::now() + limits.timeout;
        if let Some(length) = declared_length(request.headers()) {
            if length > limits.max_request_body {
                self.counts.body_too_large.fetch_add(1, Ordering::Relaxed);
                return ours(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "the request body of {length} bytes is past the bound of {} bytes",
                        limits.max_request_body
                    ),
                );
            }
        }
        let admitted = match self.admission.enter(deadline).await {
            Ok(admitted) => admitted,
            Err(refused) => {
                self.counts.busy.fetch_add(1, Ordering::Relaxed);
                let line = match refused {
                    Refused::QueueFull => format!(
                        "busy: {} instances running and {} requests waiting",
                        limits.max_instances, limits.queue
                    ),
                    Refused::Waited => format!(
                        "busy: no instance was free within the timeout of {:?}",
                        limits.timeout
                    ),
                };
                return ours(StatusCode::SERVICE_UNAVAILABLE, &line);
            }
        };
        let made = self.program().next();
        let preopens = self
            .preopens
            .get_or_init(|| WasiP2Fs::preopens_of(self.mounts.namespace()))
            .await;
        let setting = Setting {
            memory_limit: limits.memory,
            deadline,
            timeout: limits.timeout,
        };
        let fresh = || {
            let fs = WasiP2Fs::with_preopens(Arc::clone(self.mounts.namespace()), preopens.clone());
            let outgoing = outgoing::Outgoing {
                allowed: Arc::clone(&self.allowed),
            };
            let state = proxy::state(fs, &self.env, outgoing);
            proxy::store(made.runner.engine(), state, &setting)
        };
        let mut lease = Lease::take(Arc::clone(&made), admitted, self.idle.as_ref(), fresh);
        if lease.reused() {
            proxy::arm(&mut lease.store, &setting);
        }
        let body = Arc::new(bodies::BodyState::default());
        let request = request
            .map(|b| bodies::Bounded::request(b, limits.max_request_body, Arc::clone(&body)));
        let started = instance::start(
            &made.runner,
            lease,
            request,
            deadline,
            limits.timeout,
            Arc::clone(&self.instances),
        );
        let started = match started {
            Ok(started) => started,
            Err(line) => {
                self.counts.bad_request.fetch_add(1, Ordering::Relaxed);
                return ours(StatusCode::BAD_REQUEST, &line);
            }
        };
        // The run ends by the deadline (the epoch stops guest code, the timer a wait);
        // the margin is for a run that cannot be stopped sooner, and is dropped then.
        let margin = deadline + Duration::from_secs(1);
        let first = match tokio::time::timeout_at(margin.into(), started.first()).await {
            Ok(first) => first,
            Err(_) => return self.timed_out(&body),
        };
        let (answer, rest) = match first {
            First::Answered(answer, rest) => (answer, rest),
            First::Ended(ran) => {
                let response = if body.went_over() {
                    self.request_body_too_large()
                } else {
                    self.without_response(&ran.result, &body)
                };
                ran.end(false);
                return response;
            }
        };
        // Whatever is answered, the rest of the run goes with the body sent; an
        // instance whose answer is replaced by ours is not kept.
        let drive = |response: Whose| {
            let (response, guests) = match response {
                Whose::Guest(response) => (response, true),
                Whose::Ours(ours) => (ours, false),
            };
            instance::Driving::response(response, rest, guests, &self.instances)
        };
        if body.went_over() {
            return drive(Whose::Ours(self.request_body_too_large()));
        }
        match answer {
            Ok(response) => drive(self.checked(response)),
            Err(code) => {
                self.counts.traps.fetch_add(1, Ordering::Relaxed);
                drive(Whose::Ours(ours(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("the component answered with an error: {code}"),
                )))
            }
        }
    }

    /// Our answer at the timeout: 408 when the guest was left waiting for a request
    /// body that did not come, else 504.
    fn timed_out(&self, body: &bodies::BodyState) -> Response<ResponseBody> {
        let timeout = self.limits.timeout;
        if body.stalled() {
            self.counts.slow_bodies.fetch_add(1, Ordering::Relaxed);
            return ours(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the request body did not arrive within the timeout of {timeout:?}"),
            );
        }
        self.counts.timeouts.fetch_add(1, Ordering::Relaxed);
        ours(StatusCode::GATEWAY_TIMEOUT, &TimedOut(timeout).to_string())
    }

    fn request_body_too_large(&self) -> Response<ResponseBody> {
        self.counts.body_too_large.fetch_add(1, Ordering::Relaxed);
        ours(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "the request body is past the bound of {} bytes",
                self.limits.max_request_body
            ),
        )
    }

    /// The guest's response, its body bounded; refused when it says a length past the
    /// bound (ours instead).
    fn checked(&self, response: Response<ResponseBody>) -> Whose {
        let bound = self.limits.max_response_body;
        if let Some(length) = declared_length(response.headers()).filter(|n| *n > bound) {
            self.counts.body_too_large.fetch_add(1, Ordering::Relaxed);
            return Whose::Ours(ours(
                StatusCode::BAD_GATEWAY,
                &format!(
                    "the component's response body of {length} bytes is past the bound of \
                     {bound} bytes"
                ),
            ));
        }
        Whose::Guest(response.map(|body| bodies::Bounded::response(body, bound).boxed_unsync()))
    }

    /// Our answer for a guest that ended without giving a response.
    fn without_response(
        &self,
        ended: &wasmtime::Result<()>,
        body: &bodies::BodyState,
    ) -> Response<ResponseBody> {
        let counts = &self.counts;
        let Err(error) = ended else {
            counts.traps.fetch_add(1, Ordering::Relaxed);
            return ours(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the component returned without setting a response",
            );
        };
        if let Some(reached) = MemoryLimitReached::in_error(error) {
            counts.memory_limit.fetch_add(1, Ordering::Relaxed);
            return ours(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("memory limit: {reached}"),
            );
        }
        if error.downcast_ref::<TimedOut>().is_some() {
            return self.timed_out(body);
        }
        counts.traps.fetch_add(1, Ordering::Relaxed);
        let cause = error.root_cause().to_string();
        let line = format!(
            "the component trapped: {}",
            cause.lines().next().unwrap_or_default()
        );
        tracing::warn!("{line}");
        ours(StatusCode::INTERNAL_SERVER_ERROR, &line)
    }
}
