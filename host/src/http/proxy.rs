//! One request in one fresh instance: the store's data, how a `wasi:http/proxy`
//! component is linked, and how its run ends (a response, or why there is none).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::{types::ComponentItem, Component, Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

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

/// The interface a proxy exports, by name without its version.
const INCOMING_HANDLER: &str = "wasi:http/incoming-handler";

/// Links the program at `path` as a `wasi:http/proxy`: all of WASI 0.2 with our
/// file system, and `wasi:http`. A core module, or a component without the handler,
/// is refused in one line naming what is missing.
pub(crate) fn link(
    engine: &Engine,
    program: Program,
    path: &Path,
) -> Result<ProxyPre<RequestState>, SetupError> {
    let component = match program {
        Program::Component(component) => component,
        Program::Module(_) => {
            return Err(SetupError::Program(format!(
                "{} is a core module; wasm9p http serves components that export \
                 {INCOMING_HANDLER}@0.2.x",
                path.display()
            )))
        }
    };
    check_exports(engine, &component, path)?;
    let mut linker = Linker::new(engine);
    let linked = crate::p2::add_to_linker(&mut linker)
        .and_then(|()| wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker))
        .and_then(|()| linker.instantiate_pre(&component))
        .and_then(ProxyPre::new);
    linked.map_err(|e| crate::engine::link_error(path, e))
}

/// The component exports `wasi:http/incoming-handler@0.2.x`, or the one line that says
/// it does not, and what it exports instead.
fn check_exports(engine: &Engine, component: &Component, path: &Path) -> Result<(), SetupError> {
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentInstance(_)))
        .map(|(name, _)| name.to_owned())
        .collect();
    let handler = format!("{INCOMING_HANDLER}@0.2.");
    if exports.iter().any(|name| name.starts_with(&handler)) {
        return Ok(());
    }
    let has = match exports.is_empty() {
        true => "no interface".to_owned(),
        false => exports.join(", "),
    };
    Err(SetupError::Program(format!(
        "{} does not export {INCOMING_HANDLER}@0.2.x (a wasi:http/proxy component); it \
         exports {has}",
        path.display()
    )))
}

/// What a guest is given besides the request.
pub(crate) struct Setting {
    pub(crate) memory_limit: Option<usize>,
    pub(crate) deadline: Instant,
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

/// A store for one request on `engine`: memory bounded, and trapping with
/// [`TimedOut`] once the epoch ticker passes the deadline (see `crate::interrupt`).
pub(crate) fn store(
    engine: &Engine,
    state: RequestState,
    setting: &Setting,
    timeout: Duration,
) -> Store<RequestState> {
    let mut store = Store::new(engine, state);
    store.data_mut().wasi.limits = MemoryLimiter::of(setting.memory_limit);
    store.limiter(|state| &mut state.wasi.limits);
    let left = setting.deadline.saturating_duration_since(Instant::now());
    let ticks = left.as_nanos() / crate::interrupt::TICK.as_nanos();
    store.set_epoch_deadline((ticks as u64).max(1));
    let deadline = setting.deadline;
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            return Err(wasmtime::Error::new(TimedOut(timeout)));
        }
        // The ticker runs late under load: look again at the next tick.
        Ok(UpdateDeadline::Continue(1))
    });
    store
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
    }
}

/// Set by the request body once it went past its bound.
pub(crate) type BodyOver = Arc<AtomicBool>;

/// Whether the request body went past its bound.
pub(crate) fn went_over(over: &BodyOver) -> bool {
    over.load(Ordering::Relaxed)
}
