//! Plugin mounts: a file system implemented by a WebAssembly component that exports
//! `wasm9p:fs/backend` (world `fs-plugin`, in `wit/fs.wit`), mounted with
//! `--mount type=plugin,component=FILE.wasm,target=/g[,cache=..][,instances=N]`.
//!
//! How: [`PluginFs`] holds a pool of instances of the component, and
//! `wasm9p_server::nodes::serve` speaks 9P2000.L over an in-memory duplex in front of
//! it ([`PluginNodes`]), so that a plugin mount is a 9p
//! mount like any other: the same namespace rules, cache modes (`cache=none` by
//! default; `loose` when the plugin's files change only through the mount) and
//! `--stats` counters. A plugin sees no host file system, no environment and no
//! arguments; its stderr is the host's.
//!
//! Safety: each call runs with a fuel budget (`fuel=N`, about one unit per wasm
//! instruction; [`DEFAULT_FUEL`] is seconds of work) and a wall-clock limit
//! (`call_timeout=SECONDS`, default 30: fuel does not tick while a plugin waits in a host
//! call, a WASI sleep say). A call that traps, runs out of fuel or out of time fails with
//! EIO, and so does every later call on that mount: the plugin's state is no longer
//! trusted (a writable plugin's files live in its memory). The host and every other
//! mount go on; the first failure is logged once. (An instance stuck in a host call is
//! abandoned with its thread.)
//!
//! Instances: `instances=N` (default 1) instances serve calls in parallel, each call
//! taking a free one. Several instances suit plugins whose answers do not depend on
//! memory (a read-only archive, say); a plugin keeping its files in memory needs one.

mod nodes;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasm9p_proto::Errno;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Config, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::module_cache::{Engines, ModuleCache, Program, Tier, TierChoice, Upgrade, UpgradeIn};

pub use nodes::PluginNodes;

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

/// How a plugin mount runs its plugin: `instances=`, `fuel=`, `call_timeout=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PluginLimits {
    /// Instances serving calls at once (1 to 64).
    pub instances: usize,
    /// Fuel one call may burn.
    pub fuel: u64,
    /// Wall-clock time one call may take.
    pub call_timeout: Duration,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            instances: 1,
            fuel: DEFAULT_FUEL,
            call_timeout: Duration::from_secs(30),
        }
    }
}

impl PluginLimits {
    /// Sets `key` (`instances`, `fuel` or `call_timeout`) from its SPEC value.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = |lo: u64, hi: u64| {
            value
                .parse::<u64>()
                .ok()
                .filter(|n| (lo..=hi).contains(n))
                .ok_or_else(|| format!("{key}= takes {lo} to {hi}"))
        };
        match key {
            "instances" => self.instances = number(1, 64)? as usize,
            "fuel" => self.fuel = number(1_000_000, 1_000_000_000_000)?,
            "call_timeout" => self.call_timeout = Duration::from_secs(number(1, 3600)?),
            _ => return Err(format!("unknown plugin option {key}")),
        }
        Ok(())
    }
}

/// How plugin mounts get their components' compiled code: where it is kept, the tier
/// it runs on, and where an optimized compile left to do is done (see
/// `crate::module_cache::tiers`: a plugin that starts on the baseline tier stays on it
/// for the life of its mount, its instances holding its state).
#[derive(Clone, Debug, Default)]
pub struct PluginCompile {
    /// Where compiled code is kept (default: not kept).
    pub cache: ModuleCache,
    /// The tier (`--tier`; default auto).
    pub tier: TierChoice,
    /// Where the optimized compile of a plugin started on the baseline tier is done
    /// (default: a thread of this process).
    pub upgrade_in: UpgradeIn,
}

/// The engines plugins run on, one per tier: with fuel metering (see the module docs),
/// the settings `wasm9p compile --plugin` compiles for.
pub fn engines() -> Result<Engines, String> {
    let mut config = Config::new();
    config.consume_fuel(true);
    Engines::new(&config).map_err(|e| format!("{e:#}"))
}

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
    /// Calls made into the plugin.
    calls: AtomicU64,
    limits: PluginLimits,
    root: u64,
    writable: bool,
    /// The tier its code came from.
    tier: Tier,
    /// How long compiling it took here (`None`: it was cached).
    compiled_in: Option<std::time::Duration>,
    /// Its optimized code being compiled by a thread of this process, for later
    /// processes.
    upgrade: Option<Upgrade>,
    /// Its optimized code being compiled by a detached process.
    handed_off: bool,
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
    /// Compiles `component` on the tier `compile` says (or maps its compiled code from
    /// its cache) and makes `limits.instances` instances of it. The error is one line
    /// for the user.
    pub fn load(
        component: &Path,
        limits: PluginLimits,
        compile: &PluginCompile,
    ) -> Result<PluginFs, String> {
        let name = component_name(component);
        let engines = engines()?;
        let loaded = compile
            .cache
            .load_component_tiered(&engines, component, compile.tier, &compile.upgrade_in)
            .map_err(|e| e.to_string())?;
        if let Some(storing) = loaded.storing {
            // A plugin is small next to a guest; its artifact is written before the
            // mount is made, so that a process ending at once still leaves it.
            let _ = storing.join();
        }
        let Program::Component(component) = loaded.program else {
            return Err(format!("{name} is not a component"));
        };
        let engine = engines.get(loaded.tier).clone();
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
        for _ in 0..limits.instances.max(1) {
            let mut store = Store::new(
                &engine,
                PluginState {
                    ctx: WasiCtx::builder().inherit_stderr().build(),
                    table: ResourceTable::new(),
                },
            );
            store.set_fuel(limits.fuel).map_err(start)?;
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
            calls: AtomicU64::new(0),
            limits,
            root,
            writable,
            tier: loaded.tier,
            compiled_in: loaded.compiled_in,
            upgrade: loaded.upgrade,
            handed_off: loaded.handed_off,
        })
    }

    /// The tier the plugin's code came from (it stays on it for the life of the mount).
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// Whether a detached process compiles the plugin's optimized code (this mount runs
    /// the baseline code).
    pub fn handed_off(&self) -> bool {
        self.handed_off
    }

    /// The `tier` entry of the mount's `--stats`: the tier the plugin runs on, how long
    /// compiling it took here (null: its code was cached), and what becomes of its
    /// optimized code when it runs on the baseline tier: `compiling` (a thread of this
    /// process), `compiled` (that thread is done), `handed_off` (a detached `wasm9p
    /// compile`), `failed`, or null.
    pub fn tier_stats(&self) -> serde_json::Value {
        let optimized = match (&self.upgrade, self.handed_off) {
            (_, true) => Some("handed_off"),
            (Some(upgrade), _) if upgrade.failed().is_some() => Some("failed"),
            (Some(upgrade), _) if upgrade.ready().is_some() => Some("compiled"),
            (Some(_), _) => Some("compiling"),
            (None, false) => None,
        };
        serde_json::json!({
            "started_on": self.tier.name(),
            "compile_ms": self.compiled_in.map(|d| d.as_millis() as u64),
            "optimized": optimized,
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

    /// How many calls the host has made into the plugin so far (setup excluded).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
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
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut instance = self
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .ok_or(Errno::EIO)?;
        let fuel = self.limits.fuel;
        let running = tokio::task::spawn_blocking(move || {
            let result = match instance.store.set_fuel(fuel) {
                Ok(()) => f(&instance.plugin, &mut instance.store),
                Err(e) => Err(e),
            };
            (instance, result)
        });
        let (instance, result) = match tokio::time::timeout(self.limits.call_timeout, running).await
        {
            Ok(Ok(done)) => done,
            Ok(Err(_)) => return Err(Errno::EIO),
            Err(_) => {
                // The instance stays with its stuck thread; the permit goes with it.
                permit.forget();
                self.fail(&format!(
                    "a call took longer than {} s",
                    self.limits.call_timeout.as_secs()
                ));
                return Err(Errno::EIO);
            }
        };
        let answer = match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(errno_of(e)),
            Err(trap) => {
                self.fail(&format!("{trap:#}"));
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

    /// The plugin is not trusted any more: say why, once.
    fn fail(&self, why: &str) {
        if !self.broken.swap(true, Ordering::Relaxed) {
            tracing::error!(
                "plugin {}: {why}; its mount answers EIO from now on",
                self.name
            );
        }
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
