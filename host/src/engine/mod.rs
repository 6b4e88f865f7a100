//! The guest engine: one program (a preview1 module, or a component on WASI 0.2 or
//! 0.3) on a mount table, run as many guests as asked, each with its own argv,
//! environment, stdio, namespace, working directory and limits, each ending in a
//! typed [`Outcome`].
//!
//! Every command that runs guests (`run`, `batch`, `cc` and the daemon, the worker)
//! maps its arguments onto [`EngineBuilder`] and [`Guest`]; an embedder does the same
//! without the command line. In order:
//! - [`GuestEngine::builder`] takes the program's path; [`EngineBuilder::mounts`]
//!   the mount table (default: none, and each guest brings its namespace),
//!   the module cache, the tier ([`crate::module_cache::TierChoice`]), whether guests
//!   may be cancelled mid-computation, run-time mount grants, and where notes and
//!   compile progress go (default: `tracing`).
//! - [`EngineBuilder::build`] starts a runtime for the mounts, builds them, and loads
//!   the program through the compiled-module cache on its tiers (see
//!   `crate::module_cache::tiers`); a failure is a [`SetupError`] of one line.
//! - [`GuestEngine::run`] runs one [`Guest`] to its end on the calling thread (core
//!   modules on plain threads outside the runtime, as our preview1 requires;
//!   components as futures on the mounts' runtime), on the tier current when it
//!   starts: a [`Finished`] with the outcome and, when captured, its output.
//! - [`GuestEngine::finish`] stores what the program's compiles left, at the end.
//!
//! A command-line tool gets the engine as `wasm9p`'s commands make it (notes and a
//! first compile's progress in lines, compiles handed to an executable, the tier's
//! threshold from `$WASM9P_TIER_FROM`) from [`EngineBuilder::for_tool`],
//! [`progress_lines`] and [`tier_from_env`].
//!
//! The outcome is a type, never read off the guest's output: the memory limit is a
//! [`crate::limits::MemoryLimiter`] of ours, and a cancel is the flag the caller gave.

mod commands;
mod exports;
mod loading;
mod outcome;
mod presets;
mod tiered;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasm9p_guest_fs::namespace::Namespace;

pub use commands::{parse_commands, Job};
pub use exports::{top_level_exports, TopLevel};
pub use loading::ProgramSource;
pub(crate) use loading::{loading_setters, Loading};
pub use outcome::Outcome;
pub use presets::{progress_lines, tier_from_env};
pub use tiered::guest_engines;
pub(crate) use tiered::{link_error, OnTier, Runner, TieredProgram};

use crate::module_cache::{Digest, HandOff, Tier, UpgradeIn};
use crate::mounts::{MountTable, MountTableBuilder};
use crate::p1::{Input, Output, WasiP1Ctx};
use crate::p2::{MountGrant, RuntimeMountRecord, WasiP2Ctx, WasiP2Fs};
use crate::plugin::PluginCompile;

/// Where the engine's notes go: one line each (a plugin left on the baseline tier,
/// a background compile handed off or failed).
pub type Notes = Arc<dyn Fn(&str) + Send + Sync>;

/// Most bytes of one guest's stdout or stderr kept when captured.
pub const MAX_CAPTURE: usize = 16 << 20;

/// Why an engine could not be made: one line.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// This process could not start what guests need (the runtime, the engines).
    #[error("{0}")]
    Runtime(String),
    /// A mount could not be made (a server unreachable, an export refused).
    #[error("{0}")]
    Mounts(String),
    /// The program does not load or link.
    #[error("{0}")]
    Program(String),
}

/// Where one guest's stdio goes.
#[derive(Clone, Default)]
pub enum Stdio {
    /// The host's own.
    #[default]
    Inherit,
    /// Captured into [`Finished`] (at most [`MAX_CAPTURE`] bytes each), stdin empty.
    Capture,
    /// Somewhere else (a `wasm9p daemon`'s client, a worker's action). A component's
    /// output is captured and handed to these streams when it ends.
    Given {
        /// Standard input.
        stdin: Input,
        /// Standard output.
        stdout: Output,
        /// Standard error.
        stderr: Output,
    },
}

/// One guest: what it is given (see [`GuestEngine::run`]).
#[derive(Clone, Default)]
pub struct Guest {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    stdio: Stdio,
    namespace: Option<Arc<Namespace>>,
    working_dir: Option<String>,
    memory_limit: Option<usize>,
    cancel: Option<Arc<AtomicBool>>,
}

impl Guest {
    /// A guest with these arguments, `argv[0]` first; the host's stdio, no environment,
    /// the engine's mounts.
    pub fn new(argv: Vec<String>) -> Guest {
        Guest {
            argv,
            ..Guest::default()
        }
    }

    /// Its environment.
    pub fn env(mut self, env: &[(String, String)]) -> Guest {
        self.env = env.to_vec();
        self
    }

    /// Where its stdio goes.
    pub fn stdio(mut self, stdio: Stdio) -> Guest {
        self.stdio = stdio;
        self
    }

    /// The namespace it sees instead of the engine's mounts.
    pub fn namespace(mut self, namespace: Arc<Namespace>) -> Guest {
        self.namespace = Some(namespace);
        self
    }

    /// Its working directory, a guest path (preview1 modules; see
    /// [`crate::p1::WasiP1CtxBuilder::working_dir`]); `None`: wasi-libc's `/`.
    pub fn working_dir(mut self, dir: Option<&str>) -> Guest {
        self.working_dir = dir.map(str::to_owned);
        self
    }

    /// The most bytes each of its memories may take; past it the guest stops with
    /// [`Outcome::MemoryLimit`].
    pub fn memory_limit(mut self, bytes: Option<usize>) -> Guest {
        self.memory_limit = bytes;
        self
    }

    /// A flag that stops it once set ([`Outcome::Interrupted`]): a preview1 guest at
    /// its next call, and within [`crate::interrupt::TICK`] on an interruptible
    /// engine ([`EngineBuilder::interruptible`]).
    pub fn cancel(mut self, flag: Arc<AtomicBool>) -> Guest {
        self.cancel = Some(flag);
        self
    }
}

/// How one guest ended, and what it printed when captured.
pub struct Finished {
    /// How it ended.
    pub outcome: Outcome,
    /// Its stdout, when captured ([`Stdio::Capture`], or a component's
    /// [`Stdio::Given`]); else empty.
    pub stdout: Vec<u8>,
    /// Its stderr, likewise.
    pub stderr: Vec<u8>,
    /// The tier its code came from.
    pub tier: Tier,
}

/// Makes a [`GuestEngine`] (see [`GuestEngine::builder`]).
pub struct EngineBuilder {
    loading: Loading,
    mounts: MountTableBuilder,
    interruptible: bool,
    grants: Vec<MountGrant>,
}

impl EngineBuilder {
    /// The mounts guests see unless given a namespace of their own (default: none).
    pub fn mounts(mut self, table: MountTableBuilder) -> Self {
        self.mounts = table;
        self
    }

    /// The SHA-256 of the program's bytes, when the caller knows it (a
    /// content-addressed store names its files so): compiled code cached for it is
    /// mapped without the program's file being read, or even present, and only
    /// without it is the file loaded. The caller vouches for it (see
    /// [`crate::module_cache::ModuleCache::load_tiered_by_digest`]).
    pub fn program_digest(mut self, sha256: Digest) -> Self {
        if let ProgramSource::File { digest, .. } = &mut self.loading.program {
            *digest = Some(sha256);
        }
        self
    }

    /// Engines that stop a cancelled guest within a tick even mid-computation, at the
    /// price of a check in every loop of its code (see `crate::interrupt`).
    pub fn interruptible(mut self, yes: bool) -> Self {
        self.interruptible = yes;
        self
    }

    /// Lets component guests mount file systems at run time (`wasm9p:fs/mounts`) as
    /// these grants say; a core module is then refused.
    pub fn allow_mounts(mut self, grants: Vec<MountGrant>) -> Self {
        self.grants = grants;
        self
    }

    loading_setters!(
        "GuestEngine::finish",
        " An executable also finishes the compiles of plugins as they load; without one, \
         they run on a thread of this process."
    );

    /// Starts the runtime, makes the mounts and loads the program.
    pub fn build(self) -> Result<GuestEngine, SetupError> {
        let started = Instant::now();
        let upgrade_in = match &self.loading.hand_off_to {
            Some(HandOff::Process(exe)) => UpgradeIn::Process {
                exe: exe.clone(),
                extra: vec!["--plugin".into()],
            },
            Some(HandOff::Hook(_)) | None => UpgradeIn::Thread,
        };
        let plugins = PluginCompile {
            cache: self.loading.cache.clone(),
            tier: self.loading.tier,
            upgrade_in,
        };
        let table = self
            .mounts
            .module_cache(self.loading.cache.clone())
            .plugin_tier(plugins.tier, plugins.upgrade_in.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| SetupError::Runtime(format!("cannot start the runtime: {e}")))?;
        let mounts = runtime
            .block_on(table.build())
            .map_err(|e| SetupError::Mounts(e.to_string()))?;
        for mounted in mounts.mounted() {
            if let Some(plugin) = &mounted.plugin {
                if plugin.handed_off() {
                    (self.loading.notes)(&format!(
                        "plugin at {}: on the baseline tier for this run; its optimized code \
                         is being compiled in the background for later runs",
                        mounted.spec.target
                    ));
                }
            }
        }
        let program = self.loading.load(
            (guest_engines(self.interruptible)?, self.interruptible),
            tiered::runner(self.loading.program.path(), !self.grants.is_empty()),
        )?;
        Ok(GuestEngine {
            runtime,
            mounts,
            program,
            grants: self.grants,
            plugins,
            runtime_mounts: Default::default(),
            started,
            hand_off_to: self.loading.hand_off_to,
            notes: self.loading.notes,
        })
    }
}

/// One program and its mounts, running guests (see the module docs).
///
/// Fields drop in order: the mounts (and their 9p sessions) go before the runtime that
/// runs the embedded servers, so that no session sees its server vanish first and
/// reports a lost connection at exit.
pub struct GuestEngine {
    mounts: MountTable,
    program: TieredProgram,
    grants: Vec<MountGrant>,
    /// How plugins guests mount at run time are compiled and kept.
    plugins: PluginCompile,
    /// The mounts guests made at run time, as they went (for the stats).
    runtime_mounts: RuntimeMountRecord,
    started: Instant,
    hand_off_to: Option<HandOff>,
    notes: Notes,
    runtime: tokio::runtime::Runtime,
}

impl GuestEngine {
    /// An engine for the program at `program` (see [`EngineBuilder`]).
    pub fn builder(program: impl Into<PathBuf>) -> EngineBuilder {
        Self::builder_for(ProgramSource::file(program))
    }

    /// An engine for the program `source` gives (see [`EngineBuilder`]).
    pub fn builder_for(source: ProgramSource) -> EngineBuilder {
        EngineBuilder {
            loading: Loading::of(source),
            mounts: MountTable::builder(),
            interruptible: false,
            grants: Vec::new(),
        }
    }

    /// Runs one guest to its end on the tier current now.
    pub fn run(&self, guest: Guest) -> Finished {
        let program = self.program.next();
        self.run_on(&program, guest)
    }

    /// The runtime the mounts (and guests' blocking calls) run on.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }

    /// The engine's mounts.
    pub fn mounts(&self) -> &MountTable {
        &self.mounts
    }

    /// Whether guests are preview1 modules (not components).
    pub fn runs_modules(&self) -> bool {
        self.program.runs_modules()
    }

    /// Waits for what the program still has to store, and hands an unfinished
    /// optimized compile on (see [`EngineBuilder::hand_off_compiles_to`]).
    pub fn finish(&self) {
        self.program.finish(self.hand_off_to.as_ref(), &self.notes);
    }

    /// The stats JSON as of now, after `guests` guests: the mounts'
    /// ([`MountTable::stats_json`]), the program's tiers, and with run-time mount
    /// grants, `runtime_mounts`, the mounts guests made, as they went.
    pub fn stats_now(&self, guests: u64) -> serde_json::Value {
        let wall_ms = self.started.elapsed().as_millis() as u64;
        let mut stats = self.mounts.stats_json(guests, wall_ms);
        stats["tier"] = self.program.stats_json();
        if !self.grants.is_empty() {
            let made = self
                .runtime_mounts
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            stats["runtime_mounts"] = made.clone().into();
        }
        stats
    }

    /// Runs `guest` on `program` (the tier it starts on, from
    /// [`TieredProgram::next`]).
    fn run_on(&self, program: &OnTier, guest: Guest) -> Finished {
        let ns = guest
            .namespace
            .clone()
            .unwrap_or_else(|| self.mounts.namespace().clone());
        let (result, stdout, stderr) = match &program.runner {
            Runner::P1(p1) => self.run_module(p1, ns, &guest),
            Runner::Component(component) => self.run_component(component, ns, &guest),
        };
        Finished {
            outcome: Outcome::of(result, guest.cancel.as_deref()),
            stdout,
            stderr,
            tier: program.tier,
        }
    }

    fn run_module(
        &self,
        program: &crate::p1::P1Program,
        ns: Arc<Namespace>,
        guest: &Guest,
    ) -> (wasmtime::Result<i32>, Vec<u8>, Vec<u8>) {
        let mut ctx =
            WasiP1Ctx::builder(ns, self.runtime.handle().clone()).args(guest.argv.iter().cloned());
        if let Some(dir) = &guest.working_dir {
            ctx = ctx.working_dir(dir.as_str());
        }
        if let Some(bytes) = guest.memory_limit {
            ctx = ctx.memory_limit(bytes);
        }
        if let Some(flag) = &guest.cancel {
            ctx = ctx.cancel(Arc::clone(flag));
        }
        for (k, v) in &guest.env {
            ctx = ctx.env(k, v);
        }
        match &guest.stdio {
            Stdio::Inherit => (program.run(ctx.build()), Vec::new(), Vec::new()),
            Stdio::Given {
                stdin,
                stdout,
                stderr,
            } => {
                let ctx = ctx
                    .stdin(stdin.clone())
                    .stdout(stdout.clone())
                    .stderr(stderr.clone())
                    .build();
                (program.run(ctx), Vec::new(), Vec::new())
            }
            Stdio::Capture => {
                let (out, err) = (Arc::default(), Arc::default());
                let ctx = ctx
                    .stdin(Input::Empty)
                    .stdout(Output::Capture(Arc::clone(&out)))
                    .stderr(Output::Capture(Arc::clone(&err)))
                    .build();
                let result = program.run(ctx);
                let take = |b: &Mutex<Vec<u8>>| {
                    std::mem::take(&mut *b.lock().unwrap_or_else(|e| e.into_inner()))
                };
                (result, take(&out), take(&err))
            }
        }
    }

    fn run_component(
        &self,
        program: &tiered::ComponentProgram,
        ns: Arc<Namespace>,
        guest: &Guest,
    ) -> (wasmtime::Result<i32>, Vec<u8>, Vec<u8>) {
        use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
        let mut wasi = wasmtime_wasi::WasiCtx::builder();
        wasi.args(&guest.argv).envs(&guest.env);
        let (out, err) = (
            MemoryOutputPipe::new(MAX_CAPTURE),
            MemoryOutputPipe::new(MAX_CAPTURE),
        );
        // Given stdio is captured, and handed over when the component ends (a
        // daemon's clients run clang.wasm, a core module, which streams).
        match guest.stdio {
            Stdio::Inherit => wasi.inherit_stdio(),
            Stdio::Capture | Stdio::Given { .. } => wasi.stdout(out.clone()).stderr(err.clone()),
        };
        let result = self.runtime.block_on(async {
            let mut fs = WasiP2Fs::new(ns).await;
            fs.allow_mounts(self.grants.clone(), self.plugins.clone())
                .await;
            if !self.grants.is_empty() {
                fs.record_runtime_mounts(self.runtime_mounts.clone(), guest.argv.join(" "));
            }
            let ctx = WasiP2Ctx {
                wasi: wasi.build(),
                table: Default::default(),
                fs,
                limits: crate::limits::MemoryLimiter::of(guest.memory_limit),
            };
            program.run(ctx).await
        });
        let (out, err) = (out.contents().to_vec(), err.contents().to_vec());
        if let Stdio::Given {
            stdout: Output::Stream(to_out),
            stderr: Output::Stream(to_err),
            ..
        } = &guest.stdio
        {
            let _ = (to_out.0)(&out);
            let _ = (to_err.0)(&err);
        }
        (result, out, err)
    }
}
