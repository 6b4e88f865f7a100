//! WASI preview2 for components, over the same guest-fs [`Namespace`] as preview1.
//!
//! wasmtime-wasi provides every preview2 interface; we keep its cli, clocks, random,
//! io and sockets, and replace `wasi:filesystem/types` and `wasi:filesystem/preopens`
//! with our own (bindings generated from the vendored WIT in `host/wit-p2/`, sharing
//! wasmtime-wasi's `wasi:io` types so that our file streams are ordinary
//! `input-stream`s and `output-stream`s in the same resource table).
//!
//! The descriptor operations themselves (`descriptor`) work on owned values, so that
//! WASI 0.3 (`crate::p3`) runs the same ones without holding the store.
//!
//! Components run on an async engine, as futures on the tokio runtime that also runs
//! the mounts: a filesystem call that a cache answers completes without yielding, a
//! miss awaits its 9P round trip. An embedder implements [`WasiP2View`] (wasmtime-wasi's
//! [`WasiView`] plus [`WasiP2View::filesystem`]) for its store data and calls
//! [`add_to_linker`]; [`WasiP2Ctx`] is a ready-made store data type.

mod bindings;
pub(crate) mod descriptor;
pub(crate) mod errors;
mod filesystem;
mod mounts;
mod streams;

use std::sync::Arc;

use wasm9p_guest_fs::namespace::{Location, Namespace};
use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::plugin::PluginCompile;

pub use bindings::wasi::filesystem::types::ErrorCode;
pub(crate) use bindings::wasi::filesystem::types::{DescriptorFlags, OpenFlags};

/// A `wasi:filesystem` error, or a trap.
pub type FsError = wasmtime_wasi::TrappableError<ErrorCode>;

pub use filesystem::{Descriptor, DirectoryStream};
pub use mounts::{MountGrant, RuntimeMountRecord};

/// A component's filesystem: a namespace and the directories preopened from it.
pub struct WasiP2Fs {
    pub(crate) ns: Arc<Namespace>,
    pub(crate) preopens: Vec<(Location, String)>,
    /// Every file opened, to write back what is still buffered when the guest ends.
    opened: std::sync::Mutex<Vec<std::sync::Weak<dyn wasm9p_guest_fs::backend::OpenFile>>>,
    /// What the guest may mount at run time, and what it did (`wasm9p:fs/mounts`).
    runtime_mounts: mounts::RuntimeMounts,
}

impl WasiP2Fs {
    /// Preopens every mount point of `ns` (`/` first when mounted).
    pub async fn new(ns: Arc<Namespace>) -> WasiP2Fs {
        let preopens = WasiP2Fs::preopens_of(&ns).await;
        WasiP2Fs::with_preopens(ns, preopens)
    }

    /// The mount points of `ns` as [`WasiP2Fs::new`] preopens them, resolved once for
    /// many guests ([`WasiP2Fs::with_preopens`]).
    pub async fn preopens_of(ns: &Namespace) -> Vec<(Location, String)> {
        let mut preopens = Vec::new();
        for target in ns.mount_points() {
            if let Ok(location) = ns.resolve(&target, true).await {
                preopens.push((location, target));
            }
        }
        preopens
    }

    /// `ns` with these preopens (from [`WasiP2Fs::preopens_of`] on the same `ns`).
    pub fn with_preopens(ns: Arc<Namespace>, preopens: Vec<(Location, String)>) -> WasiP2Fs {
        WasiP2Fs {
            ns,
            preopens,
            opened: Default::default(),
            runtime_mounts: Default::default(),
        }
    }

    /// Lets the guest mount what `grants` allow (`wasm9p:fs/mounts`); with any grant,
    /// `/` is preopened too (a virtual directory if nothing is mounted there), so that
    /// the guest reaches what it mounts. Plugins it mounts are compiled and kept as
    /// `plugins` says.
    pub async fn allow_mounts(&mut self, grants: Vec<MountGrant>, plugins: PluginCompile) {
        if !grants.is_empty() && !self.preopens.iter().any(|(_, p)| p == "/") {
            if let Ok(root) = self.ns.resolve("/", true).await {
                self.preopens.insert(0, (root, "/".into()));
            }
        }
        self.runtime_mounts.grants = grants;
        self.runtime_mounts.plugins = plugins;
    }

    /// Records each mount the guest makes in `record` when it goes (unmounted, or the
    /// guest ended), as its `--stats` entry labelled `guest`.
    pub fn record_runtime_mounts(&mut self, record: RuntimeMountRecord, guest: impl Into<String>) {
        self.runtime_mounts.record = Some((record, guest.into()));
    }

    pub(crate) fn opened(&self, file: &Arc<dyn wasm9p_guest_fs::backend::OpenFile>) {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        opened.retain(|f| f.strong_count() > 0);
        opened.push(Arc::downgrade(file));
    }

    /// Writes back what files still open have buffered (call it when the guest ends;
    /// [`P2Program::run`] does), and says how many the guest left open.
    pub async fn close_all(&self) -> usize {
        let open: Vec<_> = {
            let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
            opened.drain(..).filter_map(|f| f.upgrade()).collect()
        };
        for file in &open {
            if let Err(e) = file.flush().await {
                tracing::warn!("a file the component left open could not be written back: {e}");
            }
        }
        open.len()
    }
}

/// What the filesystem functions work on: the filesystem and the store's resource
/// table (shared with wasmtime-wasi's streams).
pub struct FsView<'a> {
    /// The namespace and preopens.
    pub fs: &'a mut WasiP2Fs,
    /// The resource table.
    pub table: &'a mut ResourceTable,
}

/// Store data that can run components on wasm9p: wasmtime-wasi's view for the other
/// interfaces, and ours for the filesystem (over the same resource table).
pub trait WasiP2View: WasiView + Send {
    /// The filesystem side.
    fn filesystem(&mut self) -> FsView<'_>;
}

/// The filesystem functions' view of the store (0.2's and 0.3's).
pub(crate) struct HasFs;

impl HasData for HasFs {
    type Data<'a> = FsView<'a>;
}

/// Adds all of WASI preview2 to `linker` (which must be on an async engine): wasmtime-
/// wasi's interfaces, with `wasi:filesystem` replaced by ours; and `wasm9p:fs/mounts`
/// (refusing every mount unless [`WasiP2Fs::allow_mounts`] granted some).
pub fn add_to_linker<T: WasiP2View + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    // Ours replace wasmtime-wasi's definitions of the same names.
    linker.allow_shadowing(true);
    bindings::wasi::filesystem::types::add_to_linker::<T, HasFs>(linker, T::filesystem)?;
    bindings::wasi::filesystem::preopens::add_to_linker::<T, HasFs>(linker, T::filesystem)?;
    linker.allow_shadowing(false);
    mounts::bindings::wasm9p::fs::mounts::add_to_linker::<T, HasFs>(linker, T::filesystem)?;
    Ok(())
}

/// Ready-made store data for a component: wasmtime-wasi's context (arguments,
/// environment, stdio, clocks, random; no preopens of its own) and our filesystem.
pub struct WasiP2Ctx {
    /// wasmtime-wasi's part.
    pub wasi: WasiCtx,
    /// The resource table every interface shares.
    pub table: ResourceTable,
    /// The filesystem.
    pub fs: WasiP2Fs,
    /// Bounds on the component's memories (default: none of ours).
    pub limits: crate::limits::MemoryLimiter,
}

impl WasiView for WasiP2Ctx {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiP2View for WasiP2Ctx {
    fn filesystem(&mut self) -> FsView<'_> {
        FsView {
            fs: &mut self.fs,
            table: &mut self.table,
        }
    }
}

/// A component linked against WASI preview2 once, instantiated per guest.
#[derive(Clone)]
pub struct P2Program {
    pre: wasmtime_wasi::p2::bindings::CommandPre<WasiP2Ctx>,
}

impl P2Program {
    /// Links `component`, which must export `wasi:cli/run`.
    pub fn new(
        engine: &wasmtime::Engine,
        component: &wasmtime::component::Component,
    ) -> wasmtime::Result<Self> {
        let pre = linked(engine, component, add_to_linker)?;
        Ok(P2Program {
            pre: wasmtime_wasi::p2::bindings::CommandPre::new(pre)?,
        })
    }

    /// Runs the component's `wasi:cli/run` over `ctx`; its exit status (0 for `ok`, 1
    /// for `err`, or what it gave `exit`).
    pub async fn run(&self, ctx: WasiP2Ctx) -> wasmtime::Result<i32> {
        let mut store = wasmtime::Store::new(self.pre.engine(), ctx);
        store.limiter(|ctx| &mut ctx.limits);
        crate::interrupt::never(&mut store);
        let command = self.pre.instantiate_async(&mut store).await?;
        let result = command.wasi_cli_run().call_run(&mut store).await;
        store.data().fs.close_all().await;
        exit_status(result)
    }
}

/// `component` linked by `add` (a WASI version's `add_to_linker`), ready to be
/// instantiated per guest: what [`P2Program`] and [`crate::p3::P3Program`] share.
pub(crate) fn linked(
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
    add: fn(&mut Linker<WasiP2Ctx>) -> wasmtime::Result<()>,
) -> wasmtime::Result<wasmtime::component::InstancePre<WasiP2Ctx>> {
    let mut linker = Linker::new(engine);
    add(&mut linker)?;
    linker.instantiate_pre(component)
}

/// The exit status of a `wasi:cli/run` call: 0 for `ok`, 1 for `err`, or what the
/// guest gave `exit`.
pub(crate) fn exit_status(result: wasmtime::Result<Result<(), ()>>) -> wasmtime::Result<i32> {
    match result {
        Ok(Ok(())) => Ok(0),
        Ok(Err(())) => Ok(1),
        Err(e) => match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) => Ok(exit.0),
            None => Err(e),
        },
    }
}
