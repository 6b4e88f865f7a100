//! What a task's start needs, found at its create ([`Prepared`]), and what both kinds
//! of task (a guest run to its end, `crate::cli_task`; an HTTP server,
//! `crate::http_task`) share: where the engine's notes and a first compile's progress
//! go, the hand-off of unfinished compiles to the node, and one-line reports on the
//! container's stderr. The sandbox (`crate::sandbox`) makes a [`Prepared`] and starts
//! the task on it; the tasks know nothing of the sandbox.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use wasm9p_host::engine::{Notes, ProgramSource};
use wasm9p_host::module_cache::{HandOff, Keeper, ModuleCache, Progress};

use crate::broker::CompileFor;
use wasm9p_host::mounts::MountTableBuilder;

use crate::broker::Described;
use crate::workload::Workload;

/// What a task's start needs, found at its create.
pub struct Prepared {
    /// The program.
    pub program: ProgramSource,
    /// What it runs as.
    pub workload: Workload,
    /// Its arguments, `argv[0]` the entrypoint.
    pub argv: Vec<String>,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// Its setup, as the broker read it.
    pub described: Described,
    /// Its mounts (connected when the engine is built).
    pub mounts: MountTableBuilder,
    /// The memory file holding an OCI layer's wasm, which the program names.
    pub(crate) _layer_file: Option<OwnedFd>,
}

impl Prepared {
    /// The module cache: the node's, which keeps the code and alone writes it
    /// ([`crate::broker`]): this task fetches what is kept, read-only; a program whose
    /// code is not kept it hands to the node to compile for `engines`, and maps the
    /// code once the node has kept it. None when the node keeps no code.
    pub fn module_cache(&self, engines: CompileFor) -> ModuleCache {
        if !self.described.keeps_code {
            return ModuleCache::disabled();
        }
        ModuleCache::kept_by(Keeper {
            fetch: Arc::new(crate::broker::fetch_artifact),
            compile: Arc::new(move |path, tier| {
                crate::broker::compile_on_node_now(path, engines, tier)
            }),
        })
        .tier_from(self.described.tier_from)
    }

    /// The bound on each of the guest's memories: the container's memory limit less
    /// what this process holds as the guest starts (the limit covers the whole
    /// container, runtime and caches included), and a margin, so that the guest meets
    /// wasm9p's typed limit before the kernel's OOM killer. `None`: no limit.
    pub fn memory_bound(&self) -> Option<usize> {
        let limit = self.described.bundle.memory_limit?;
        let held = resident_bytes().unwrap_or(0);
        let bound = limit
            .saturating_sub(held + MEMORY_MARGIN)
            .max(MIN_GUEST_MEMORY);
        Some(usize::try_from(bound).unwrap_or(usize::MAX))
    }

    /// The entrypoint's name, as the task's lines name it.
    pub fn name(&self) -> String {
        self.program.path().display().to_string()
    }
}

/// Kept free under the container's memory limit beyond what the process holds: the
/// caches and buffers a run adds.
const MEMORY_MARGIN: u64 = 16 << 20;

/// The least a guest is given, however little the limit leaves: one wasm page.
const MIN_GUEST_MEMORY: u64 = 64 << 10;

/// This process's resident set, from `/proc/self/statm`.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// Hands an optimized compile a task leaves unfinished to the node side
/// ([`crate::broker::compile_on_node`]), for `engines`.
pub fn hand_off(engines: crate::broker::CompileFor) -> HandOff {
    HandOff::Hook(Arc::new(move |path| {
        crate::broker::compile_on_node(path, engines)
    }))
}

/// Where wasm9p's notes go: the shim's log.
pub fn notes() -> Notes {
    Arc::new(|line| log::info!("wasm9p: {line}"))
}

/// Who hears how a compile goes: the shim's log (a test reads "compiling" there).
pub fn progress() -> Arc<dyn Fn(Progress) + Send + Sync> {
    Arc::new(|progress| match progress {
        Progress::Compiling { name, bytes } => {
            log::info!("wasm9p: compiling {name} ({bytes} bytes)")
        }
        Progress::Waiting { name } => {
            log::info!("wasm9p: waiting for another process compiling {name}")
        }
        Progress::StillCompiling(d) => log::info!("wasm9p: still compiling ({d:.0?})"),
        Progress::Compiled(d) => log::info!("wasm9p: compiled in {d:.1?}"),
        Progress::NotStored(why) => log::warn!("wasm9p: compiled code not kept: {why}"),
    })
}

/// Says one line of why a task cannot run, where its user and its operator look: the
/// container's stderr and the shim's log.
pub fn report(line: &str) {
    log::error!("wasm9p: {line}");
    let _ = writeln!(std::io::stderr(), "wasm9p: {line}");
}

/// A WASI guest's working directory is `/`, whatever the spec's: wasi-libc keeps its
/// own, starting at `/`, and preview1 has no way to set it. (`wasm9p run --dir`'s way,
/// the working directory preopened as `/`, would misread every absolute path outside
/// a volume here, where the rootfs is mounted at `/`.) A spec that names another is
/// told so, on the task's stderr, rather than run as if it had been applied.
pub fn say_working_dir_not_applied() {
    let Ok(cwd) = std::env::current_dir() else {
        return;
    };
    if cwd != std::path::Path::new("/") {
        report(&format!(
            "the working directory {} is not applied: a WASI guest starts in / (give paths \
             from /)",
            cwd.display()
        ));
    }
}
