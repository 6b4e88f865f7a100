//! One request in one fresh instance: the store's data, how a component is linked
//! (a `wasi:http/proxy` of WASI 0.2, or a WASI 0.3 `wasi:http/service`), and how its
//! run ends (a response, or why there is none).

use std::path::Path;
use std::time::{Duration, Instant};

use wasmtime::component::{types::ComponentItem, Component, Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p3::bindings::ServicePre;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::kind::HandlerKind;
use super::outgoing::Outgoing;
use crate::engine::SetupError;
use crate::limits::MemoryLimiter;
use crate::module_cache::Program;
use crate::p2::{FsView, WasiP2Ctx, WasiP2View};

/// The store's data for one request: WASI (our file system), `wasi:http`, and the
/// outgoing allow list.
pub(crate) struct RequestState {
    pub(crate) wasi: WasiP2Ctx,
    pub(crate) http: WasiHttpCtx,
    pub(crate) outgoing: Outgoing,
    /// When the request being served times out (guest code past it traps).
    deadline: Instant,
    /// Its timeout, for the trap's message.
    timeout: Duration,
}

impl WasiView for RequestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.wasi.ctx()
    }
}

impl WasiP2View for RequestState {
    fn filesystem(&mut self) -> FsView<'_> {
        self.wasi.filesystem()
    }
}

impl WasiHttpView for RequestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.wasi.table,
            hooks: &mut self.outgoing,
        }
    }
}

/// What `wasm9p http` serves, said in the lines that refuse anything else.
const SERVED: &str = "wasi:http/incoming-handler@0.2.x or wasi:http/handler@0.3.x";

/// A component linked once, instantiated per request.
#[derive(Clone)]
pub(crate) enum Linked {
    /// A `wasi:http/proxy` of WASI 0.2: `incoming-handler.handle(request, outparam)`.
    P2(ProxyPre<RequestState>),
    /// A WASI 0.3 `wasi:http/service`: `handler.handle(request) -> response`, async.
    P3(ServicePre<RequestState>),
}

impl Linked {
    /// The engine its code was compiled for.
    pub(crate) fn engine(&self) -> &Engine {
        match self {
            Linked::P2(pre) => pre.engine(),
            Linked::P3(pre) => pre.engine(),
        }
    }
}

/// Links the program at `path`: a 0.2 proxy with all of WASI 0.2 (our file system)
/// and `wasi:http` 0.2; a 0.3 service with all of WASI 0.2 and 0.3 (our file system
/// in both: a component built with the preview1 adapter imports 0.2's) and
/// `wasi:http` 0.3. A core module, or a component without either handler, is refused
/// in one line naming what is missing.
pub(crate) fn link(engine: &Engine, program: Program, path: &Path) -> Result<Linked, SetupError> {
    let component = match program {
        Program::Component(component) => component,
        Program::Module(_) => {
            return Err(SetupError::Program(format!(
                "{} is a core module; wasm9p http serves components that export {SERVED}",
                path.display()
            )))
        }
    };
    let mut linker = Linker::new(engine);
    let linked = match handler_of(engine, &component, path)? {
        HandlerKind::Proxy => crate::p2::add_to_linker(&mut linker)
            .and_then(|()| wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker))
            .and_then(|()| linker.instantiate_pre(&component))
            .and_then(ProxyPre::new)
            .map(Linked::P2),
        HandlerKind::Service => crate::p3::add_to_linker(&mut linker)
            .and_then(|()| wasmtime_wasi_http::p3::add_to_linker(&mut linker))
            .and_then(|()| linker.instantiate_pre(&component))
            .and_then(ServicePre::new)
            .map(Linked::P3),
    };
    linked.map_err(|e| crate::engine::link_error(path, e))
}

/// The handler `component` exports (the 0.2 one when it has both), or the one line
/// that says it has neither, and what it exports instead.
fn handler_of(
    engine: &Engine,
    component: &Component,
    path: &Path,
) -> Result<HandlerKind, SetupError> {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentInstance(_)))
        .map(|(name, _)| name.to_owned())
        .collect();
    if let Some(kind) = HandlerKind::of_exports(&exports) {
        return Ok(kind);
    }
    let has = match exports.is_empty() {
        true => "no interface".to_owned(),
        false => exports.join(", "),
    };
    Err(SetupError::Program(format!(
        "{} exports no HTTP handler ({SERVED}); it exports {has}",
        path.display()
    )))
}

/// What a guest is given besides the request.
pub(crate) struct Setting {
    pub(crate) memory_limit: Option<usize>,
    pub(crate) deadline: Instant,
    pub(crate) timeout: Duration,
}

/// The trap of a guest still running at its deadline.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimedOut(pub(crate) Duration);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request took longer than its timeout of {:?}",
            self.0
        )
    }
}

impl std::error::Error for TimedOut {}

/// A store for requests on `engine`: memory bounded, and trapping with [`TimedOut`]
/// once the epoch ticker passes the deadline of the request it serves (see
/// `crate::interrupt`), which [`arm`] sets.
pub(crate) fn store(
    engine: &Engine,
    state: RequestState,
    setting: &Setting,
) -> Store<RequestState> {
    let mut store = Store::new(engine, state);
    store.data_mut().wasi.limits = MemoryLimiter::of(setting.memory_limit);
    store.limiter(|state| &mut state.wasi.limits);
    store.epoch_deadline_callback(|store| {
        let state = store.data();
        if Instant::now() >= state.deadline {
            return Err(wasmtime::Error::new(TimedOut(state.timeout)));
        }
        // The ticker runs late under load: look again at the next tick, after
        // letting the other requests on this thread run.
        Ok(UpdateDeadline::Yield(1))
    });
    arm(&mut store, setting);
    store
}

/// Sets the deadline of the request `store` is about to serve.
pub(crate) fn arm(store: &mut Store<RequestState>, setting: &Setting) {
    let left = setting.deadline.saturating_duration_since(Instant::now());
    let ticks = left.as_nanos() / crate::interrupt::TICK.as_nanos();
    store.set_epoch_deadline((ticks as u64).max(1));
    let state = store.data_mut();
    state.deadline = setting.deadline;
    state.timeout = setting.timeout;
}

/// The parts of a store for one request, before the request's own resources.
pub(crate) fn state(
    fs: crate::p2::WasiP2Fs,
    env: &[(String, String)],
    outgoing: Outgoing,
) -> RequestState {
    let mut wasi = WasiCtx::builder();
    // A guest's stdout and stderr are the server's stderr (stdout stays the server's
    // own); it reads no stdin.
    wasi.envs(env)
        .stdout(wasmtime_wasi::cli::stderr())
        .inherit_stderr();
    RequestState {
        wasi: WasiP2Ctx {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            fs,
            limits: MemoryLimiter::default(),
        },
        http: WasiHttpCtx::new(),
        outgoing,
        deadline: Instant::now(),
        timeout: Duration::ZERO,
    }
}
