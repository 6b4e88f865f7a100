//! The programs of one slot process ([`crate::slot`]), by the content-store file
//! of their module: each compiled (or mapped from the module cache) once per process,
//! whatever number of actions use it; and how one action's guest runs on them.
//!
//! A module is a blob of the content store, named by the SHA-256 of its bytes: its
//! optimized code, when the module cache has it, is mapped by that digest, and the
//! blob need not be fetched at all (a worker whose image was given clang.wasm's code
//! by `wasm9p compile` never fetches its 75 MB). Otherwise the file is loaded: the
//! module cache knows its digest by the file's identity and does not hash it again,
//! and its compiled code is kept on disk for every slot and the worker's restarts
//! (`--tier auto`: a big module starts on the baseline code while the optimized one
//! is compiled in the background, one compile across processes). The engines have no
//! epoch interruption: a slot's guest is stopped by killing its process (see
//! [`crate::slots`]), so its code runs as fast as in `wasm9p cc`, and the daemon and the
//! worker share compiled artifacts. A module that does not load fails its actions
//! with the reason.
//!
//! A guest's namespace: the input root at `/` over 9P (a Unix socket to the worker's
//! `ActionFs`, `cache=loose`, the pages of its tree's files in this slot's
//! [`SharedCache`] too), the action's scratch directory at `/tmp`. A multi-call LLVM
//! module (clang.wasm) runs as the tool its file is named after, the driver's jobs
//! one by one as `wasm9p cc` runs them; any other module or component runs as it is.
//! How it ended is the engine's typed [`Outcome`], the memory limit included.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use wasm9p_guest_fs::backend::bind::BindFs;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::cache::SharedCache;
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_remote::action::{Ended, GuestCounts, Ran};
use wasm9p_remote::layer;

use wasm9p_host::engine::{
    tier_from_env, EngineBuilder, Guest, GuestEngine, Notes, Outcome, Stdio,
};
use wasm9p_host::module_cache::ModuleCache;
use wasm9p_host::p1::{Input, Output, Sink};
use wasm9p_host::toolchain::Tool;
use wasm9p_host::toolchain::{Invocation, Io};

use crate::protocol::ModuleFile;

/// How a slot process runs its programs.
pub struct SlotConfig {
    /// Where compiled modules are kept.
    pub module_cache: PathBuf,
    /// The most bytes of input files' pages and input trees' metadata this slot keeps
    /// for its actions (0: none).
    pub page_cache_size: u64,
    /// Where the engine's notes and a first compile's progress go.
    pub notes: Notes,
    /// A `wasm9p` executable that finishes unfinished optimized compiles in the
    /// background (none: they are left unfinished).
    pub hand_off_to: Option<PathBuf>,
}

/// One guest to run in a slot: its argv in the namespace of one action.
pub(crate) struct SlotRun {
    /// Its arguments, `argv[0]` as the `Command` gives it.
    pub argv: Vec<String>,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// Its working directory, absolute in its namespace.
    pub working_dir: String,
    /// The Unix socket the worker serves the action's input root on, to be `/`.
    pub socket: PathBuf,
    /// The action's directory of its own, to be `/tmp`.
    pub tmp: PathBuf,
    /// Where its stdout and stderr go (stdin is empty).
    pub stdout: Sink,
    pub stderr: Sink,
    /// The most bytes its memory may take.
    pub memory_limit: usize,
}

/// A slot's programs.
pub(crate) struct Programs {
    config: SlotConfig,
    /// The input files' pages, and the input trees' names, listings, attributes and
    /// link targets, every action of this slot reads and keeps (see
    /// `wasm9p_remote::layer::fixed_content`); none with a size of 0.
    shared: Option<Arc<SharedCache>>,
    loaded: Mutex<HashMap<ModuleFile, Result<Arc<GuestEngine>, String>>>,
}

/// Why a slot has no program for a module.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoProgram {
    /// Its compiled code is not kept, and its file is not fetched yet.
    #[error("its compiled code is not kept and its module is not fetched")]
    NotFetched,
    /// It does not load (one line).
    #[error("{0}")]
    NotLoaded(String),
}

impl Programs {
    /// Programs whose compiled code is kept in `config.module_cache`, their actions'
    /// mounts sharing up to `config.page_cache_size` bytes of input files' pages and
    /// metadata.
    pub(crate) fn new(config: SlotConfig) -> Programs {
        let page_cache = config.page_cache_size;
        Programs {
            config,
            shared: (page_cache > 0)
                .then(|| Arc::new(SharedCache::new(page_cache, layer::fixed_content))),
            loaded: Mutex::default(),
        }
    }

    /// The program of `module`: loaded once, by its digest or from its file (an error
    /// is one line, and kept: the same module fails the same way; a module not
    /// fetched is asked for again once it is).
    pub(crate) fn get(&self, module: &ModuleFile) -> Result<Arc<GuestEngine>, NoProgram> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = loaded.get(module) {
            return known.clone().map_err(NoProgram::NotLoaded);
        }
        // Looked at before the load: a file that comes in meanwhile is not taken
        // for one that will never load.
        let fetched = module.path.exists();
        let engine = tier_from_env(ModuleCache::at(&self.config.module_cache))
            .and_then(|cache| {
                let c = &self.config;
                EngineBuilder::for_tool(&module.path, cache, c.notes.clone(), c.hand_off_to.clone())
                    .program_digest(module.sha256)
                    .build()
                    .map_err(|e| format!("its module does not load: {e}"))
            })
            .map(Arc::new);
        if engine.is_err() && !fetched {
            return Err(NoProgram::NotFetched);
        }
        loaded.insert(module.clone(), engine.clone());
        engine.map_err(NoProgram::NotLoaded)
    }

    /// Waits for what the programs still store, and hands their unfinished optimized
    /// compiles to background processes (the slot is ending).
    pub(crate) fn finish(&self) {
        let loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        for engine in loaded.values().flatten() {
            engine.finish();
        }
    }

    /// Runs `run` on `engine` to its end: how it ended and its mount's counters, or
    /// one line saying why it could not start.
    pub(crate) fn run(&self, engine: &GuestEngine, run: SlotRun) -> Result<Ran, String> {
        let (namespace, mount) = engine
            .runtime()
            .block_on(namespace(&run.socket, &run.tmp, self.shared.clone()))
            .map_err(|e| format!("the action's mounts: {e}"))?;
        // A slot's guest is stopped by killing the slot: nothing sets this.
        let never = Arc::new(AtomicBool::new(false));
        let argv0 = &run.argv[0];
        let outcome = match Tool::named(argv0.rsplit('/').next().unwrap_or(argv0)) {
            // clang.wasm as the tool it is named after, as `wasm9p cc` runs it.
            Some(tool) => Invocation {
                host: engine,
                namespace: Some(namespace.clone()),
                env: run.env.clone(),
                cwd: Path::new(&run.working_dir),
                usr: None,
                tmp: &run.tmp,
                io: Io::Client {
                    stdin: Input::Empty,
                    stdout: run.stdout.clone(),
                    stderr: run.stderr.clone(),
                    cancel: never,
                },
                memory_limit: Some(run.memory_limit),
            }
            .run(tool, &run.argv[1..]),
            None => {
                let guest = Guest::new(run.argv.clone())
                    .env(&run.env)
                    .namespace(namespace.clone())
                    .working_dir(Some(&run.working_dir))
                    .memory_limit(Some(run.memory_limit))
                    .stdio(Stdio::Given {
                        stdin: Input::Empty,
                        stdout: Output::Stream(run.stdout.clone()),
                        stderr: Output::Stream(run.stderr.clone()),
                    });
                let outcome = engine.run(guest).outcome;
                // Said where the action's own words go, as a command says it.
                let said = match &outcome {
                    Outcome::Trapped(_) => "the guest trapped",
                    _ => "the guest was stopped",
                };
                if let Some(why) = outcome.reason() {
                    let _ = (run.stderr.0)(format!("wasm9p: {said}: {why}\n").as_bytes());
                }
                outcome
            }
        };
        // Every fid the guest left goes now, its clunk answered, before the worker
        // is told the guest ended and reads the outputs.
        drop(namespace);
        mount.session().close();
        let stats = mount.stats();
        let reads_9p = stats.rpc.iter().find(|(name, _)| *name == "read");
        let ended = match outcome {
            Outcome::Exited(code) => Ended::Exited(code),
            Outcome::MemoryLimit(reached) => Ended::MemoryLimit(reached.to_string()),
            Outcome::Interrupted => Ended::Stopped,
            trapped @ Outcome::Trapped(_) => Ended::Trapped(trapped.reason().unwrap_or_default()),
        };
        Ok(Ran {
            ended,
            counts: GuestCounts {
                rpcs_9p: stats.rpc_total,
                reads_9p: reads_9p.map_or(0, |(_, n)| *n),
                shared_page_hits: stats.cache.shared_page_hits,
                shared_metadata_hits: stats.cache.shared_metadata_hits,
            },
        })
    }
}

/// The input root at `/` (over 9P on `socket`, its pages of fixed contents in
/// `shared` too) and `tmp` at `/tmp`: the namespace, and the 9p mount (for its
/// counters).
async fn namespace(
    socket: &Path,
    tmp: &Path,
    shared: Option<Arc<SharedCache>>,
) -> Result<(Arc<Namespace>, Arc<NinepFs>), String> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| format!("{}: {e}", socket.display()))?;
    let options = NinepOptions::parse([("cache", Some("loose"))]).map_err(|e| e.to_string())?;
    let mount = wasm9p_host::mounts::attach_over(Box::new(stream), &options, shared).await?;
    let mut ns = Namespace::new();
    ns.mount("/", mount.clone(), false)
        .map_err(|e| format!("/: {e}"))?;
    let tmp = BindFs::open(tmp).map_err(|e| format!("/tmp: {e}"))?;
    ns.mount("/tmp", Arc::new(tmp), false)
        .map_err(|e| format!("/tmp: {e}"))?;
    Ok((Arc::new(ns), mount))
}
