//! Loading guests, with compiled code cached on disk.
//!
//! Compiling clang.wasm (75 MB) takes about 40 s on two cores; a user running it a
//! hundred times must pay that once. [`ModuleCache::load`] keys the compiled artifact by
//! the SHA-256 of the guest's bytes together with the engine's compatibility hash
//! (wasmtime version, target, compiler settings), so a changed module, a new wasmtime
//! or a different configuration never picks up a stale artifact. A hit is mapped from
//! disk (`deserialize_file`, no copy); a miss compiles once, reports progress while it
//! does, and stores the artifact by writing a temporary file and renaming it into
//! place, so concurrent first runs cannot see half a file. Plugin components come
//! through [`ModuleCache::load_component_tiered`] and are kept the same way (under
//! their own engines' settings, which meter fuel).
//!
//! Trust: a cached artifact is native code. The cache directory is created private
//! (mode 0700) and only artifacts this module wrote are ever loaded; the guest's own
//! file, on the other hand, is never accepted in precompiled form, since its origin is
//! unknown.
//!
//! Size: after a store, artifacts beyond [`ModuleCache::limit_bytes`] in total are
//! removed, least recently used first (a hit refreshes its file's mtime); both tiers'
//! artifacts count. Temporary files untouched for an hour (a process killed between
//! writing an artifact and renaming it into place) go at a store too.
//!
//! Tiers (`tiers`): [`ModuleCache::load_tiered`] starts a big guest on Winch's code
//! when Cranelift's is not cached yet, and compiles Cranelift's in the background.
//!
//! Keepers ([`Keeper`], [`ModuleCache::kept_by`]): a process that may not write
//! native code other processes will run (a containerd shim's task, inside its
//! container) fetches artifacts by key, read-only, from the process that keeps them.
//! Code that is not kept it asks the keeper to compile (the baseline tier for a big
//! guest's first start, the optimized code following in the background), waits, and
//! maps what the keeper kept; only what the keeper cannot keep is compiled in this
//! process's memory, and nothing is ever stored by it. Artifacts are written readable
//! by all (mode 0644) in the private directory, so that a process of another user
//! given a descriptor of one can map it.
//!
//! Sources (`source`): the digest of a guest's bytes is remembered by the file's
//! identity, so a hit maps its artifact without reading or hashing the guest. A caller
//! that knows the digest already (a content-addressed store: the build farm's worker)
//! loads by it ([`ModuleCache::load_tiered_by_digest`]), and a hit needs no file at
//! all: a worker runs a compiler it has compiled before without fetching its bytes.

use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

mod source;
mod tiers;

pub use source::Digest;
use source::Source;

pub use tiers::{
    Bounds, Engines, HandOff, HandOffHook, Loaded, Tier, TierChoice, Upgrade, UpgradeIn,
};
use wasmtime::component::Component;
use wasmtime::{Engine, Module};

/// A loaded guest: a core module (WASI preview1) or a component (preview2).
#[derive(Clone)]
pub enum Program {
    /// A core wasm module.
    Module(Module),
    /// A component.
    Component(Component),
}

/// Why a guest could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The guest's file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not wasm wasmtime accepts.
    #[error("cannot load {path}: {why}")]
    Invalid {
        /// The guest's file.
        path: PathBuf,
        /// wasmtime's first line.
        why: String,
    },
}

/// What [`ModuleCache::load`] reports while it works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Another process is compiling it: this one waits for its artifact.
    Waiting {
        /// The guest's file name.
        name: String,
    },
    /// Compiling started (nothing usable was cached).
    Compiling {
        /// The guest's file name.
        name: String,
        /// Its size.
        bytes: u64,
    },
    /// Still compiling, this long so far.
    StillCompiling(Duration),
    /// Compiled in this time (and stored when the cache is enabled).
    Compiled(Duration),
    /// The artifact could not be stored; the guest runs anyway.
    NotStored(String),
}

/// How a [`Keeper`] is asked for an artifact by key.
pub type Fetch = Arc<dyn Fn(&str) -> Option<std::fs::File> + Send + Sync>;

/// How a [`Keeper`] is asked to compile a program (at a path) for a tier: it compiles
/// and keeps that tier's code (and, after the baseline's, the optimized code, in the
/// background), and answers once the tier's code is kept (`true`) or cannot be.
pub type Compile = Arc<dyn Fn(&Path, Tier) -> bool + Send + Sync>;

/// Compiled code kept by another process, which alone writes it: a containerd shim's
/// node side keeps it for the containers it starts, none of which may write native
/// code that other containers then run. This process fetches artifacts read-only by
/// key; for code that is not kept it asks the keeper to compile it, waits, and maps
/// what the keeper kept; it compiles in its own memory only what the keeper could not
/// keep, and stores nothing.
#[derive(Clone)]
pub struct Keeper {
    /// The artifact of a key (`KEY.cwasm` in the keeper's directory), opened
    /// read-only by the keeper; `None`: not kept.
    pub fetch: Fetch,
    /// Asked to compile and keep the program at a path for a tier (its code was not
    /// found).
    pub compile: Compile,
}

impl std::fmt::Debug for Keeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keeper")
    }
}

/// Compiled artifacts on disk, or kept by another process, or none (the default).
#[derive(Debug, Clone)]
pub struct ModuleCache {
    dir: Option<PathBuf>,
    /// Artifacts come from a keeper instead of `dir` (which is then `None`).
    keeper: Option<Keeper>,
    limit_bytes: u64,
    /// Modules this big start on the baseline tier (see [`tiers`]).
    tier_from: u64,
}

impl Default for ModuleCache {
    fn default() -> Self {
        Self::disabled()
    }
}

/// How often a long compile says it is still going.
const TICK: Duration = Duration::from_secs(10);

impl ModuleCache {
    /// The default total size of the artifacts kept.
    pub const DEFAULT_LIMIT: u64 = 4 << 30;

    /// A cache in `dir` (created on first store).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        ModuleCache {
            dir: Some(dir.into()),
            keeper: None,
            limit_bytes: Self::DEFAULT_LIMIT,
            tier_from: Self::DEFAULT_TIER_FROM,
        }
    }

    /// No cache: every load compiles.
    pub fn disabled() -> Self {
        ModuleCache {
            dir: None,
            keeper: None,
            limit_bytes: 0,
            tier_from: Self::DEFAULT_TIER_FROM,
        }
    }

    /// Code kept by `keeper` (see [`Keeper`]): fetched read-only, never stored here.
    pub fn kept_by(keeper: Keeper) -> Self {
        ModuleCache {
            keeper: Some(keeper),
            ..Self::disabled()
        }
    }

    /// Whether there is a cache at all (a directory or a keeper).
    pub fn enabled(&self) -> bool {
        self.dir.is_some() || self.keeper.is_some()
    }

    /// Opens the guest at `path` as the cache reads guests: hashed when there is a
    /// cache, its digest remembered in the directory when there is one.
    fn source(&self, path: &Path) -> Result<Source, LoadError> {
        Source::open(self.dir.as_deref(), self.enabled(), path)
    }

    /// The code of `source` for `engine` (of `tier`), compiled and kept by the keeper
    /// when there is one: its progress reported as a compile's (it is one, on the
    /// keeper's side). `None`: no keeper, or it could not keep it.
    fn kept_for(
        &self,
        engine: &Engine,
        (source, tier): (&Source, Tier),
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Option<(Program, Duration)> {
        let keeper = self.keeper.as_ref()?;
        let started = Instant::now();
        progress(Progress::Compiling {
            name: source
                .path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            bytes: source.len(),
        });
        if !(keeper.compile)(source.path(), tier) {
            return None;
        }
        let program = self.cached(engine, source)?;
        progress(Progress::Compiled(started.elapsed()));
        Some((program, started.elapsed()))
    }

    /// The user's cache: `$WASM9P_CACHE_DIR`, else `$XDG_CACHE_HOME/wasm9p/modules`,
    /// else `$HOME/.cache/wasm9p/modules`; disabled when none of these is set.
    pub fn user_default() -> Self {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(dir) = var("WASM9P_CACHE_DIR") {
            return Self::at(dir);
        }
        if let Some(xdg) = var("XDG_CACHE_HOME") {
            return Self::at(Path::new(&xdg).join("wasm9p/modules"));
        }
        match var("HOME") {
            Some(home) => Self::at(Path::new(&home).join(".cache/wasm9p/modules")),
            None => Self::disabled(),
        }
    }

    /// Keeps at most `bytes` of artifacts (least recently used go first).
    pub fn with_limit(mut self, bytes: u64) -> Self {
        self.limit_bytes = bytes;
        self
    }

    /// The directory, when enabled.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The size limit.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Loads the guest at `path` for `engine`: from the cache when an artifact for these
    /// exact bytes and this engine exists, else by compiling (calling `progress` at the
    /// start, every 10 s, and at the end) and storing the result.
    pub fn load(
        &self,
        engine: &Engine,
        path: &Path,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Program, LoadError> {
        let mut source = self.source(path)?;
        self.load_source(engine, &mut source, progress)
    }

    fn load_source(
        &self,
        engine: &Engine,
        source: &mut Source,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Program, LoadError> {
        if let Some(program) = self.cached(engine, source) {
            return Ok(program);
        }
        if let Some((program, _)) = self.kept_for(engine, (source, Tier::Optimized), progress) {
            return Ok(program);
        }
        let path = source.path().to_owned();
        let (bytes, digest) = source.read()?;
        self.compile_and_store(engine, &path, bytes, digest, progress)
    }

    /// Where the artifact of the bytes with `digest` for `engine` lives (`None`: the
    /// cache is off).
    fn artifact_path(&self, engine: &Engine, digest: Option<&Digest>) -> Option<PathBuf> {
        let (dir, digest) = (self.dir.as_ref()?, digest?);
        Some(dir.join(format!("{}.cwasm", cache_key(engine, digest))))
    }

    /// The stored artifact of `source` for `engine`, mapped, if there is a usable one.
    fn cached(&self, engine: &Engine, source: &Source) -> Option<Program> {
        self.mapped(engine, source.digest()?, Some(source.component()))
    }

    /// The stored artifact of the bytes with `digest` for `engine`, mapped, if there is
    /// a usable one: a module or a component, as the artifact says.
    fn cached_by_digest(&self, engine: &Engine, digest: &Digest) -> Option<Program> {
        self.mapped(engine, digest, None)
    }

    /// The artifact of the bytes with `digest` for `engine`, mapped and marked used: a
    /// component or not as `component` says, or as the artifact says when `None`.
    fn mapped(&self, engine: &Engine, digest: &Digest, component: Option<bool>) -> Option<Program> {
        if let Some(keeper) = &self.keeper {
            return fetched(engine, keeper, &cache_key(engine, digest), component);
        }
        let artifact = self.artifact_path(engine, Some(digest))?;
        let component = match component {
            Some(component) => component,
            None => match Engine::detect_precompiled_file(&artifact) {
                Ok(Some(wasmtime::Precompiled::Component)) => true,
                Ok(Some(wasmtime::Precompiled::Module)) => false,
                _ => return None,
            },
        };
        let program = load_artifact(engine, &artifact, component)?;
        touch(&artifact);
        Some(program)
    }

    /// Compiles `bytes` (whose digest is `digest`) with `engine` (reporting progress),
    /// stores the artifact and maps it.
    fn compile_and_store(
        &self,
        engine: &Engine,
        path: &Path,
        bytes: &[u8],
        digest: Option<&Digest>,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Program, LoadError> {
        let invalid = |why: String| LoadError::Invalid {
            path: path.into(),
            why,
        };
        let component = is_component(bytes);
        let artifact = self.artifact_path(engine, digest);
        let serialized = reported_compile(path, bytes, progress, || {
            precompile(engine, bytes, component)
        })?;
        if let Some(artifact) = &artifact {
            match self.store(artifact, &serialized) {
                Ok(()) => {
                    if let Some(program) = load_artifact(engine, artifact, component) {
                        return Ok(program);
                    }
                }
                Err(e) => progress(Progress::NotStored(e.to_string())),
            }
        }
        deserialize_vouched(engine, &serialized, component).map_err(|e| invalid(first_line(&e)))
    }

    /// Compiles `bytes` with `engine` (reporting progress) into a program that can run
    /// at once. The artifact is written to a temporary file in the cache and the
    /// program mapped from it; the thread returned syncs it and renames it into place
    /// (the fsync of hundreds of MB stays off the way to the first guest). No thread
    /// when the cache is off or the file could not be written: the program is then
    /// loaded from memory.
    ///
    /// Why not `Module::new`: wasmtime writes the object of a module it compiles for
    /// itself into a fresh mapping of its own, faulted in 4 KiB at a time on one
    /// thread. Precompiled, the object is a block of [`crate::huge_alloc`], faulted in
    /// ahead of its writer by the prefault thread, and it is written to the cache
    /// anyway; mapped from there, the guest faults in only the code it runs.
    ///
    /// `lock`, the artifact's lock this process holds (see [`tiers`]), is let go once
    /// the artifact is in place, so that processes waiting for it find it then.
    fn compile_now_store_later(
        &self,
        engine: &Engine,
        path: &Path,
        (bytes, digest): (&[u8], Option<&Digest>),
        progress: &(dyn Fn(Progress) + Sync),
        lock: Option<tiers::ArtifactLock>,
    ) -> Result<(Program, Option<std::thread::JoinHandle<()>>), LoadError> {
        let component = is_component(bytes);
        let serialized = crate::huge_alloc::prefault::during(|| {
            reported_compile(path, bytes, progress, || {
                precompile(engine, bytes, component)
            })
        })?;
        if let Some(artifact) = self.artifact_path(engine, digest) {
            match self.stage(&artifact, &serialized) {
                Ok(staged) => {
                    if let Some(program) = load_artifact(engine, &staged.tmp, component) {
                        let cache = self.clone();
                        let storing = std::thread::spawn(move || {
                            if let Err(e) = cache.commit(staged, &artifact) {
                                tracing::warn!("compiled module not cached: {e}");
                            }
                            drop(lock);
                        });
                        return Ok((program, Some(storing)));
                    }
                    let _ = std::fs::remove_file(&staged.tmp);
                }
                Err(e) => progress(Progress::NotStored(e.to_string())),
            }
        }
        let program = deserialize_vouched(engine, &serialized, component).map_err(|why| {
            LoadError::Invalid {
                path: path.into(),
                why: first_line(&why),
            }
        })?;
        Ok((program, None))
    }

    fn store(&self, artifact: &Path, serialized: &[u8]) -> std::io::Result<()> {
        let staged = self.stage(artifact, serialized)?;
        self.commit(staged, artifact)
    }

    /// Writes `serialized` to a new temporary file beside `artifact`, two halves at
    /// once (the page cache's first touch of hundreds of MB is faster on two cores).
    fn stage(&self, artifact: &Path, serialized: &[u8]) -> std::io::Result<Staged> {
        use std::os::unix::fs::FileExt;
        let dir = artifact
            .parent()
            .expect("artifacts live in the cache directory");
        create_private_dir(dir)?;
        let (tmp, file) = tempfile_in(dir)?;
        let half = (serialized.len() / 2)
            .next_multiple_of(4096)
            .min(serialized.len());
        let (first, second) = serialized.split_at(half);
        let written = std::thread::scope(|scope| {
            let second = scope.spawn(|| file.write_all_at(second, half as u64));
            let first = file.write_all_at(first, 0);
            first.and(
                second
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("panicked"))),
            )
        });
        match written {
            Ok(()) => Ok(Staged { tmp, file }),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// Syncs a staged artifact and renames it into place, then keeps the cache within
    /// its bounds.
    fn commit(&self, staged: Staged, artifact: &Path) -> std::io::Result<()> {
        let dir = artifact
            .parent()
            .expect("artifacts live in the cache directory");
        let Staged { tmp, file } = staged;
        let done = file
            .sync_all()
            .and_then(|()| std::fs::rename(&tmp, artifact));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.evict(dir, artifact);
        source::trim_memos(dir);
        Ok(())
    }

    /// Removes the least recently used artifacts until the total fits the limit, never
    /// the one just stored.
    fn evict(&self, dir: &Path, keep: &Path) {
        remove_stale_temporaries(dir);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut artifacts: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut total: u64 = artifacts.iter().map(|a| a.1).sum();
        artifacts.sort();
        for (_, len, path) in artifacts {
            if total <= self.limit_bytes {
                break;
            }
            if path != keep && std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

/// How long a temporary file may sit in the cache before it counts as left behind.
const STALE_TEMPORARY: Duration = Duration::from_secs(3600);

/// Removes the temporary files of `dir` untouched for [`STALE_TEMPORARY`]: artifacts
/// whose process was killed between writing them and renaming them into place (a
/// store takes seconds; a file left behind would hold hundreds of MB for good, and
/// eviction counts only artifacts).
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let temporary = entry
            .file_name()
            .to_string_lossy()
            .starts_with(TEMPORARY_PREFIX);
        let stale = || {
            let modified = entry.metadata().ok()?.modified().ok()?;
            Some(now.duration_since(modified).ok()? >= STALE_TEMPORARY)
        };
        if temporary && stale() == Some(true) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// An artifact written to a temporary file, not yet synced nor in place.
struct Staged {
    tmp: PathBuf,
    file: std::fs::File,
}

/// The serialized artifact of `bytes`, a component's when `component`.
fn precompile(engine: &Engine, bytes: &[u8], component: bool) -> wasmtime::Result<Vec<u8>> {
    match component {
        true => engine.precompile_component(bytes),
        false => engine.precompile_module(bytes),
    }
}

/// Runs the compile `work` of the guest at `path` (`bytes`), reporting its start, a
/// tick every [`TICK`] and its end.
fn reported_compile<T>(
    path: &Path,
    bytes: &[u8],
    progress: &(dyn Fn(Progress) + Sync),
    work: impl FnOnce() -> wasmtime::Result<T>,
) -> Result<T, LoadError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let started = Instant::now();
    progress(Progress::Compiling {
        name,
        bytes: bytes.len() as u64,
    });
    let compiled = with_ticks(progress, work).map_err(|e| LoadError::Invalid {
        path: path.into(),
        why: first_line(&format!("{e:#}")),
    })?;
    progress(Progress::Compiled(started.elapsed()));
    Ok(compiled)
}

/// Runs `work`, reporting every [`TICK`] until it returns.
fn with_ticks<T>(progress: &(dyn Fn(Progress) + Sync), work: impl FnOnce() -> T) -> T {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let started = Instant::now();
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(TICK) {
                progress(Progress::StillCompiling(started.elapsed()));
            }
        });
        let out = work();
        drop(done);
        out
    })
}

/// Refuses a precompiled artifact given as a guest (its origin is unknown).
fn refuse_precompiled(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    match Engine::detect_precompiled(bytes) {
        Some(_) => Err(LoadError::Invalid {
            path: path.into(),
            why: "precompiled artifacts are not accepted as guests; give the .wasm".into(),
        }),
        None => Ok(()),
    }
}

/// Whether `bytes` is a component rather than a core module (the layer field of the
/// preamble; wasmtime itself reports anything else that is wrong).
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [1, 0]
}

/// The hex SHA-256 of the guest's digest and the engine's compatibility hash.
fn cache_key(engine: &Engine, digest: &Digest) -> String {
    struct ShaHasher(Sha256);
    impl Hasher for ShaHasher {
        fn finish(&self) -> u64 {
            unreachable!("only written to")
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = ShaHasher(Sha256::new());
    hasher.0.update(digest);
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
    source::hex(&hasher.0.finalize())
}

/// The artifact `keeper` keeps under `key`, mapped: through the read-only descriptor
/// the keeper opened (`/proc/self/fd/N`, open to this process whichever user it runs
/// as: artifacts are readable by all, in a private directory), closed once mapped.
fn fetched(
    engine: &Engine,
    keeper: &Keeper,
    key: &str,
    component: Option<bool>,
) -> Option<Program> {
    use std::os::fd::AsRawFd;
    let file = (keeper.fetch)(key)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let component = match component {
        Some(component) => component,
        None => match Engine::detect_precompiled_file(&path) {
            Ok(Some(wasmtime::Precompiled::Component)) => true,
            Ok(Some(wasmtime::Precompiled::Module)) => false,
            _ => return None,
        },
    };
    load_artifact(engine, &path, component)
}

/// Maps an artifact this cache (or its keeper) wrote; `None` when it is missing or unusable (it is then
/// compiled again and overwritten).
fn load_artifact(engine: &Engine, artifact: &Path, component: bool) -> Option<Program> {
    if !artifact.is_file() {
        return None;
    }
    // SAFETY: the file is one this cache stored (a private directory, named by the hash
    // of the guest and the engine, written in full before being renamed into place), or
    // its keeper did the same in its own, or one this process has just written in full
    // there and not yet renamed (`stage`);
    // wasmtime checks its header, version and engine settings before mapping it.
    #[allow(unsafe_code)]
    let loaded = unsafe {
        if component {
            Component::deserialize_file(engine, artifact).map(Program::Component)
        } else {
            Module::deserialize_file(engine, artifact).map(Program::Module)
        }
    };
    loaded
        .inspect_err(|e| tracing::warn!("ignoring cached {}: {e}", artifact.display()))
        .ok()
}

/// Compiles a guest's wasm `bytes` (a core module or a component) for `engine` ahead
/// of time, for a store of compiled code kept by someone else: containerd's content
/// store, through a shim's precompile hook. [`load_compiled_ahead`] loads it.
pub fn compile_ahead(engine: &Engine, bytes: &[u8]) -> Result<Vec<u8>, String> {
    if Engine::detect_precompiled(bytes).is_some() {
        return Err("it is compiled code already, not wasm".into());
    }
    precompile(engine, bytes, is_component(bytes)).map_err(|e| first_line(&format!("{e:#}")))
}

/// Loads `code` that [`compile_ahead`] made for an engine of `engine`'s settings
/// (`name` says what it is in errors). wasmtime refuses code made by another version or
/// for other settings.
///
/// Trust: compiled code is native code, and only its header is checked. The caller
/// vouches that `code` came from [`compile_ahead`] through a store only the host
/// writes (a containerd shim: containerd's content store, fed by the shim's own
/// precompile hook); a guest's own file is never taken this way.
pub fn load_compiled_ahead(
    engine: &Engine,
    name: &Path,
    code: &[u8],
) -> Result<Program, LoadError> {
    let invalid = |why: String| LoadError::Invalid {
        path: name.into(),
        why,
    };
    let component = match Engine::detect_precompiled(code) {
        Some(wasmtime::Precompiled::Component) => true,
        Some(wasmtime::Precompiled::Module) => false,
        None => return Err(invalid("it is not code compiled ahead of time".into())),
    };
    // The caller vouches that the code came from `compile_ahead` (see the docs).
    deserialize_vouched(engine, code, component).map_err(|e| invalid(first_line(&e)))
}

/// Loads compiled code from memory: what was just compiled in this process, or what
/// the caller of [`load_compiled_ahead`] vouches for. Either way it came from
/// wasmtime's own precompile, and wasmtime checks its header, version and engine
/// settings before using it.
fn deserialize_vouched(
    engine: &Engine,
    serialized: &[u8],
    component: bool,
) -> Result<Program, String> {
    // SAFETY: `serialized` is wasmtime's own precompiled output (see above).
    #[allow(unsafe_code)]
    let loaded = unsafe {
        if component {
            Component::deserialize(engine, serialized).map(Program::Component)
        } else {
            Module::deserialize(engine, serialized).map(Program::Module)
        }
    };
    loaded.map_err(|e| format!("{e:#}"))
}

fn touch(path: &Path) {
    if let Ok(file) = std::fs::File::options().append(true).open(path) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// How the names of temporary files in the cache begin.
const TEMPORARY_PREFIX: &str = ".tmp-";

/// A new file in `dir` with a unique name, opened for writing.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    for attempt in 0u32..100 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = dir.join(format!(
            "{TEMPORARY_PREFIX}{}-{nanos}-{attempt}",
            std::process::id()
        ));
        match std::fs::File::options()
            .write(true)
            .create_new(true)
            // Readable by all, in a directory only its owner enters: a process given a
            // descriptor of an artifact (a shim's task, maybe of another user, from a
            // keeper) may reopen it through /proc/self/fd to map it.
            .mode(0o644)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no free temporary name"))
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or(text).to_string()
}

#[cfg(test)]
mod tests;
