//! Plugin mounts: a file system implemented by a WebAssembly component that exports
//! `wasm9p:fs/backend` (world `fs-plugin`, in `wit/fs.wit`), mounted with
//! `--mount type=plugin,component=FILE.wasm,target=/g[,cache=..][,instances=N]`.
//!
//! How: [`PluginFs`] holds a pool of instances of the component, and [`serve`] speaks
//! 9P2000.L over an in-memory duplex in front of it, so that a plugin mount is a 9p
//! mount like any other: the same namespace rules, cache modes (`cache=none` by
//! default; `loose` when the plugin's files change only through the mount) and
//! `--stats` counters. A plugin sees no host file system, no environment and no
//! arguments; its stderr is the host's.
//!
//! Safety: each call runs with a fuel budget (`fuel=N`, about one unit per wasm
//! instruction; [`DEFAULT_FUEL`] is seconds of work). A call that traps or runs out of fuel fails with EIO,
//! and so does every later call on that mount: the plugin's state is no longer trusted
//! (a writable plugin's files live in its memory). The host and every other mount go
//! on; the first failure is logged once.
//!
//! Instances: `instances=N` (default 1) instances serve calls in parallel, each call
//! taking a free one. Several instances suit plugins whose answers do not depend on
//! memory (a read-only archive, say); a plugin keeping its files in memory needs one.

mod serve;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use wasm9p_proto::Errno;
use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub use serve::serve;

/// Bindings of the `fs-plugin` world (`wit/fs.wit`).
mod bindings {
    #![allow(missing_docs)]
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "wasm9p:fs/fs-plugin",
    });
}

use bindings::exports::wasm9p::fs::backend::{Attr, Dirent};
use bindings::wasm9p::fs::types::{Error as PluginError, Kind};
use bindings::{FsPlugin, FsPluginPre};

/// Fuel one call may burn by default (about one unit per wasm instruction).
pub const DEFAULT_FUEL: u64 = 5_000_000_000;

struct PluginState {
    ctx: WasiCtx,
    table: ResourceTable,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

struct Instance {
    store: Store<PluginState>,
    plugin: FsPlugin,
}

/// A loaded plugin: its instances and whether it is still trusted.
pub struct PluginFs {
    name: String,
    free: Mutex<Vec<Instance>>,
    /// Wakes a caller waiting for a free instance.
    available: tokio::sync::Semaphore,
    broken: AtomicBool,
    fuel: u64,
    root: u64,
    writable: bool,
}

impl std::fmt::Debug for PluginFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginFs")
            .field("name", &self.name)
            .field("broken", &self.broken.load(Ordering::Relaxed))
            .finish()
    }
}

impl PluginFs {
    /// Compiles `component` and makes `instances` instances of it. The error is one
    /// line for the user.
    pub fn load(component: &Path, instances: usize, fuel: u64) -> Result<PluginFs, String> {
        let name = component_name(component);
        let mut config = Config::new();
        config.consume_fuel(true);
        let engine = Engine::new(&config).map_err(|e| format!("{e:#}"))?;
        let bytes = std::fs::read(component)
            .map_err(|e| format!("cannot read {}: {e}", component.display()))?;
        let component = Component::new(&engine, &bytes)
            .map_err(|e| format!("{name} is not a component: {e:#}"))?;
        let mut linker = Linker::<PluginState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| format!("{e:#}"))?;
        let pre = linker
            .instantiate_pre(&component)
            .and_then(FsPluginPre::new)
            .map_err(|e| {
                format!(
                    "{name} does not fit the fs-plugin world (export wasm9p:fs/backend, import \
                     only WASI): {e:#}"
                )
            })?;
        let start = |e: wasmtime::Error| format!("{name}: {e:#}");
        let mut pool = Vec::new();
        for _ in 0..instances.max(1) {
            let mut store = Store::new(
                &engine,
                PluginState {
                    ctx: WasiCtx::builder().inherit_stderr().build(),
                    table: ResourceTable::new(),
                },
            );
            store.set_fuel(fuel).map_err(start)?;
            let plugin = pre.instantiate(&mut store).map_err(start)?;
            pool.push(Instance { store, plugin });
        }
        let first = &mut pool[0];
        let backend = first.plugin.wasm9p_fs_backend();
        let root = backend.call_root(&mut first.store).map_err(start)?;
        let writable = backend.call_writable(&mut first.store).map_err(start)?;
        Ok(PluginFs {
            name,
            available: tokio::sync::Semaphore::new(pool.len()),
            free: Mutex::new(pool),
            broken: AtomicBool::new(false),
            fuel,
            root,
            writable,
        })
    }

    /// The root directory's node.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Whether the plugin implements writes.
    pub fn writable(&self) -> bool {
        self.writable
    }

    /// Whether a trap or an exhausted budget stopped the plugin (every call is EIO).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }

    /// Runs `f` on a free instance, on a blocking thread, with a fresh fuel budget.
    async fn call<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&FsPlugin, &mut Store<PluginState>) -> wasmtime::Result<Result<T, PluginError>>
            + Send
            + 'static,
    ) -> Result<T, Errno> {
        if self.is_broken() {
            return Err(Errno::EIO);
        }
        let permit = self.available.acquire().await.map_err(|_| Errno::EIO)?;
        let mut instance = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or(Errno::EIO)?;
        let this = self.clone();
        let fuel = self.fuel;
        let (instance, result) = tokio::task::spawn_blocking(move || {
            let result = match instance.store.set_fuel(fuel) {
                Ok(()) => f(&instance.plugin, &mut instance.store),
                Err(e) => Err(e),
            };
            (instance, result)
        })
        .await
        .map_err(|_| Errno::EIO)?;
        let answer = match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(errno_of(e)),
            Err(trap) => {
                if !this.broken.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "plugin {}: {trap:#}; its mount answers EIO from now on",
                        this.name
                    );
                }
                Err(Errno::EIO)
            }
        };
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(instance);
        drop(permit);
        answer
    }

    pub(crate) async fn lookup(self: &Arc<Self>, dir: u64, name: String) -> Result<u64, Errno> {
        self.call(move |p, s| p.wasm9p_fs_backend().call_lookup_child(s, dir, &name))
            .await
    }

    pub(crate) async fn getattr(self: &Arc<Self>, node: u64) -> Result<Attr, Errno> {
        self.call(move |p, s| p.wasm9p_fs_backend().call_getattr(s, node))
            .await
    }

    pub(crate) async fn readlink(self: &Arc<Self>, node: u64) -> Result<String, Errno> {
        self.call(move |p, s| p.wasm9p_fs_backend().call_readlink(s, node))
            .await
    }

    pub(crate) async fn read(
        self: &Arc<Self>,
        node: u64,
        offset: u64,
        len: u32,
    ) -> Result<Vec<u8>, Errno> {
        let data = self
            .call(move |p, s| p.wasm9p_fs_backend().call_read(s, node, offset, len))
            .await?;
        if data.len() > len as usize {
            return Err(Errno::EIO);
        }
        Ok(data)
    }

    pub(crate) async fn readdir(self: &Arc<Self>, dir: u64) -> Result<Vec<Dirent>, Errno> {
        self.call(move |p, s| p.wasm9p_fs_backend().call_readdir(s, dir))
            .await
    }

    pub(crate) async fn write(
        self: &Arc<Self>,
        node: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> Result<u32, Errno> {
        let len = data.len();
        let n = self
            .call(move |p, s| p.wasm9p_fs_backend().call_write(s, node, offset, &data))
            .await?;
        if n as usize > len {
            return Err(Errno::EIO);
        }
        Ok(n)
    }

    pub(crate) async fn set_size(self: &Arc<Self>, node: u64, size: u64) -> Result<(), Errno> {
        self.call(move |p, s| p.wasm9p_fs_backend().call_set_size(s, node, size))
            .await
    }

    pub(crate) async fn create(
        self: &Arc<Self>,
        dir: u64,
        name: String,
        kind: Kind,
        mode: u32,
        target: String,
    ) -> Result<u64, Errno> {
        self.call(move |p, s| {
            p.wasm9p_fs_backend()
                .call_create(s, dir, &name, kind, mode, &target)
        })
        .await
    }

    pub(crate) async fn unlink(self: &Arc<Self>, dir: u64, name: String) -> Result<(), Errno> {
        self.call(move |p, s| p.wasm9p_fs_backend().call_unlink(s, dir, &name))
            .await
    }

    pub(crate) async fn rename(
        self: &Arc<Self>,
        from: u64,
        name: String,
        to: u64,
        to_name: String,
    ) -> Result<(), Errno> {
        self.call(move |p, s| {
            p.wasm9p_fs_backend()
                .call_rename(s, from, &name, to, &to_name)
        })
        .await
    }
}

fn component_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The errno a guest sees for a plugin's error.
fn errno_of(e: PluginError) -> Errno {
    match e {
        PluginError::NotFound => Errno::ENOENT,
        PluginError::NotDirectory => Errno::ENOTDIR,
        PluginError::IsDirectory => Errno::EISDIR,
        PluginError::Exists => Errno::EEXIST,
        PluginError::NotEmpty => Errno::ENOTEMPTY,
        PluginError::Access => Errno::EACCES,
        PluginError::ReadOnly => Errno::EROFS,
        PluginError::Unsupported => Errno::EOPNOTSUPP,
        PluginError::Invalid => Errno::EINVAL,
        PluginError::Io => Errno::EIO,
    }
}
