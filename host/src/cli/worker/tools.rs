//! The programs a worker runs, by the digest of their module: each compiled (or mapped
//! from the module cache) once per worker process, whatever number of actions use it.
//!
//! A module is a blob of the content store, a file that never changes: the module
//! cache knows its digest by the file's identity and does not hash it again, and its
//! compiled code is kept on disk for the worker's restarts (`--tier auto`: a big
//! module starts on the baseline code while the optimized one is compiled in the
//! background, as everywhere). Concurrent first actions of one module share its
//! load. Each program is a [`GuestEngine`] without mounts of its own: every action
//! brings its namespace. A module that does not load fails its actions with the
//! reason.
//!
//! They are how `wasm9p-remote` runs an action's guest ([`Guests`]): the input root
//! at `/` over 9P (an in-process transport to its `ActionFs`, `cache=loose`, the
//! pages of its tree's files in the worker's [`SharedPages`] too), the
//! action's scratch directory at `/tmp`; a multi-call LLVM module (clang.wasm) runs
//! as the tool its file is named after, the driver's jobs one by one as `wasm9p cc`
//! runs them; any other module or component runs as it is. How it ended is the
//! engine's typed [`Outcome`], the memory limit included.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wasm9p_guest_fs::backend::bind::BindFs;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::cache::SharedPages;
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_remote::action::{Captured, Ended, GuestRun, Guests, Ran};
use wasm9p_remote::layer::{self, ActionFs};
use wasm9p_remote::Digest;

use crate::cli::cc::invocation::{Invocation, Io};
use crate::cli::cc::Tool;
use crate::cli::engines::{engine_for, tier_from_env};
use crate::engine::{Guest, GuestEngine, Outcome, Stdio};
use crate::module_cache::ModuleCache;
use crate::p1::{Input, Output, Sink};

type Loading = Arc<tokio::sync::OnceCell<Result<Arc<GuestEngine>, String>>>;

/// The worker's programs.
pub(super) struct Tools {
    module_cache: PathBuf,
    /// The input files' pages every action's mount reads and keeps (see
    /// `wasm9p_remote::layer::fixed_content`); none with `--page-cache-size 0`.
    shared_pages: Option<Arc<SharedPages>>,
    loaded: Mutex<HashMap<Digest, Loading>>,
    /// Where loads wait (the actions' threads block on it).
    runtime: tokio::runtime::Handle,
}

impl Tools {
    /// Programs whose compiled code is kept in `module_cache`, their actions' mounts
    /// sharing up to `page_cache` bytes of input files' pages.
    pub(super) fn new(
        module_cache: PathBuf,
        page_cache: u64,
        runtime: tokio::runtime::Handle,
    ) -> Tools {
        Tools {
            module_cache,
            shared_pages: (page_cache > 0)
                .then(|| Arc::new(SharedPages::new(page_cache, layer::fixed_content))),
            loaded: Mutex::default(),
            runtime,
        }
    }

    /// The program of the module `digest`, whose bytes are the file `path`: loaded
    /// once (an error is one line, and kept: the same module fails the same way).
    pub(super) async fn get(
        &self,
        digest: Digest,
        path: &Path,
    ) -> Result<Arc<GuestEngine>, String> {
        let cell = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(digest)
            .or_default()
            .clone();
        let cache = tier_from_env(ModuleCache::at(&self.module_cache))
            .map_err(|_| "WASM9P_TIER_FROM is not a number of bytes".to_owned())?;
        let path = path.to_owned();
        cell.get_or_init(|| async move {
            // Loading maps or compiles the module: work for a thread of its own.
            let loaded = tokio::task::spawn_blocking(move || {
                engine_for(&path, cache)
                    // A cancelled lease stops its guest within a tick, even
                    // mid-computation.
                    .interruptible(true)
                    .build()
                    .map_err(|e| format!("its module does not load: {e}"))
            })
            .await
            .map_err(|e| format!("loading the module: {e}"))?;
            loaded.map(Arc::new)
        })
        .await
        .clone()
    }

    /// Waits for what the programs still store, and hands their unfinished optimized
    /// compiles to background processes (the worker is stopping).
    pub(super) fn finish(&self) {
        let loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        for cell in loaded.values() {
            if let Some(Ok(host)) = cell.get() {
                host.finish();
            }
        }
    }
}

impl Guests for Tools {
    type Program = Arc<GuestEngine>;

    fn load(&self, module: Digest, path: &Path) -> Result<Arc<GuestEngine>, String> {
        self.runtime.block_on(self.get(module, path))
    }

    fn run(&self, engine: &Arc<GuestEngine>, run: GuestRun<'_>) -> Result<Ran, String> {
        let (namespace, mount) = engine
            .runtime()
            .block_on(namespace(
                run.fs.clone(),
                run.tmp,
                self.shared_pages.clone(),
            ))
            .map_err(|e| format!("the action's mounts: {e}"))?;
        let argv0 = &run.argv[0];
        let outcome = match Tool::named(argv0.rsplit('/').next().unwrap_or(argv0)) {
            // clang.wasm as the tool it is named after, as `wasm9p cc` runs it.
            Some(tool) => Invocation {
                host: engine,
                namespace: Some(namespace.clone()),
                env: run.env.to_vec(),
                cwd: Path::new(run.working_dir),
                usr: None,
                tmp: run.tmp,
                io: Io::Client {
                    stdin: Input::Empty,
                    stdout: sink(&run.stdout),
                    stderr: sink(&run.stderr),
                    cancel: run.cancel.clone(),
                },
                memory_limit: Some(run.memory_limit),
            }
            .run(tool, &run.argv[1..]),
            None => {
                let guest = Guest::new(run.argv.to_vec())
                    .env(run.env)
                    .namespace(namespace.clone())
                    .working_dir(Some(run.working_dir))
                    .memory_limit(Some(run.memory_limit))
                    .cancel(run.cancel.clone())
                    .stdio(Stdio::Given {
                        stdin: Input::Empty,
                        stdout: Output::Stream(sink(&run.stdout)),
                        stderr: Output::Stream(sink(&run.stderr)),
                    });
                let outcome = engine.run(guest).outcome;
                // Said where the action's own words go, as a command says it.
                let said = match &outcome {
                    Outcome::Trapped(_) => "the guest trapped",
                    _ => "the guest was stopped",
                };
                if let Some(why) = outcome.reason() {
                    run.stderr
                        .push(format!("wasm9p: {said}: {why}\n").as_bytes());
                }
                outcome
            }
        };
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
            rpcs_9p: stats.rpc_total,
            reads_9p: reads_9p.map_or(0, |(_, n)| *n),
            shared_page_hits: stats.cache.shared_page_hits,
        })
    }
}

/// A guest stream writing into `captured`.
fn sink(captured: &Captured) -> Sink {
    let captured = captured.clone();
    Sink(Arc::new(move |data: &[u8]| {
        captured.push(data);
        Ok(())
    }))
}

/// The input root at `/` (over 9P, from `fs`, its pages of fixed contents in
/// `shared` too) and `tmp` at `/tmp`: the namespace, and the 9p mount (for its
/// counters).
async fn namespace(
    fs: Arc<ActionFs>,
    tmp: &Path,
    shared: Option<Arc<SharedPages>>,
) -> Result<(Arc<Namespace>, Arc<NinepFs>), String> {
    let (client_end, server_end) = wasm9p_proto::transport::duplex();
    tokio::spawn(wasm9p_server::nodes::serve(fs, server_end));
    let options = NinepOptions::parse([("cache", Some("loose"))]).map_err(|e| e.to_string())?;
    let mount = crate::mounts::attach_in_process(client_end, &options, shared).await?;
    let mut ns = Namespace::new();
    ns.mount("/", mount.clone(), false)
        .map_err(|e| format!("/: {e}"))?;
    let tmp = BindFs::open(tmp).map_err(|e| format!("/tmp: {e}"))?;
    ns.mount("/tmp", Arc::new(tmp), false)
        .map_err(|e| format!("/tmp: {e}"))?;
    Ok((Arc::new(ns), mount))
}
