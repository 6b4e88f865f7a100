//! Tiers: a big guest's first run starts in seconds, not after a minute of Cranelift.
//!
//! Two engines alike in every setting but the compiler ([`Engines`]):
//! [`Tier::Baseline`] is Winch, wasmtime's baseline compiler (it compiles clang.wasm
//! several times faster; its code runs somewhat slower), [`Tier::Optimized`] is
//! Cranelift. The compiler is part of an engine's compatibility hash, so the two
//! artifacts of a module are keyed apart and kept side by side.
//!
//! [`TierChoice::Auto`] (the default): a module whose optimized artifact is cached runs
//! on it. Otherwise a big module (from [`ModuleCache::tier_from`] bytes: a small one
//! compiles with Cranelift in well under a second, so it just does) starts on the
//! baseline tier, cached or compiled now, while a background thread compiles it with
//! Cranelift at a low priority and stores it: [`Upgrade`]. Whoever holds the upgrade
//! switches new guests to the optimized module once [`Upgrade::ready`] has it; guests
//! already running finish on what they started with. A process that ends first calls
//! [`Upgrade::hand_off`]: a detached `wasm9p compile --background` finishes the job, so
//! the next run is fast.
//!
//! Plugins ([`ModuleCache::load_component_tiered`]) tier alike, but never switch: a
//! plugin's instances hold its state (a memfs's files), so a plugin that started on the
//! baseline tier stays on it for the life of its mount, and its optimized code is for
//! the next process. The CLI has that compile done by a detached `wasm9p compile
//! --background --plugin` at once ([`UpgradeIn::Process`]) rather than by a thread
//! whose result this process would not use.
//!
//! One compile of an artifact at a time, across processes: the compiler holds an
//! exclusive lock on `KEY.lock` next to the artifact; whoever finds it held waits for
//! the artifact instead (and compiles after all if the holder died without storing it).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use wasmtime::{Config, Engine, OptLevel, RegallocAlgorithm, Strategy};

use super::{
    first_line, is_component, load_artifact, Digest, LoadError, ModuleCache, Program, Progress,
    Source,
};

/// A compiler tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Winch: fast to compile.
    Baseline,
    /// Cranelift: fast to run.
    Optimized,
}

impl Tier {
    /// `baseline` or `optimized`, as `--stats` and `--tier` say it.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Baseline => "baseline",
            Tier::Optimized => "optimized",
        }
    }
}

/// Which tier guests run on (`--tier`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TierChoice {
    /// The optimized tier when it is cached; else, for a big module, the baseline tier
    /// now and the optimized one as soon as it is compiled (in the background).
    #[default]
    Auto,
    /// Winch only: Cranelift never runs.
    Baseline,
    /// Cranelift only: a miss waits for it (the behaviour before tiers).
    Optimized,
}

impl FromStr for TierChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<TierChoice, String> {
        match s {
            "auto" => Ok(TierChoice::Auto),
            "baseline" => Ok(TierChoice::Baseline),
            "optimized" => Ok(TierChoice::Optimized),
            other => Err(format!(
                "unknown tier {other:?}: expected auto, baseline or optimized"
            )),
        }
    }
}

/// How compiled code keeps a guest's memory accesses within its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bounds {
    /// Guard pages past the memory, and the signal an access to them raises: no check
    /// in the code. A pooling allocator then resets a slot's protections each time an
    /// instance grew its memory: an `mprotect` whose TLB flush interrupts every core
    /// running the process, a cost virtual machines multiply.
    Guarded,
    /// An explicit check at each access, no guard pages, no signals: a pool slot's
    /// memory stays accessible from one instance to the next, reset without any
    /// protection change. The checks cost a guest that computes a few per cent.
    Explicit,
}

/// The engines of the two tiers.
#[derive(Clone)]
pub struct Engines {
    optimized: Engine,
    baseline: Engine,
}

impl Engines {
    /// Engines made from `config`, whose compiler strategy is set per tier.
    ///
    /// Both tiers leave out native unwind information (`.eh_frame`): wasmtime walks wasm
    /// frames by their frame pointers for traps and backtraces and never reads it; only
    /// outside unwinders (a debugger, `perf --call-graph dwarf`) would. It was a share
    /// of every compile's serial tail and of every artifact's size.
    ///
    /// The baseline tier also leaves out the address map (machine code back to wasm
    /// offsets): a trap on baseline code names its functions without their offsets,
    /// and `WASMTIME_BACKTRACE_DETAILS` finds no lines there. Building that map for the
    /// 320 MB of code Winch makes of clang.wasm took about half a second of its first
    /// run, on one core; the optimized tier, which guests move to, keeps it.
    pub fn new(config: &Config) -> wasmtime::Result<Engines> {
        Engines::with_bounds(config, Bounds::Guarded)
    }

    /// Engines as [`Engines::new`] makes them, the optimized tier's memory accesses
    /// checked as `bounds` says (the baseline tier's are always [`Bounds::Guarded`]:
    /// Winch needs guard pages).
    pub fn with_bounds(config: &Config, bounds: Bounds) -> wasmtime::Result<Engines> {
        let mut optimized = config.clone();
        optimized.strategy(Strategy::Cranelift);
        optimized.native_unwind_info(false);
        if bounds == Bounds::Explicit {
            optimized
                .signals_based_traps(false)
                .memory_guard_size(0)
                .guard_before_linear_memory(false);
        }
        let mut baseline = config.clone();
        baseline.strategy(Strategy::Winch);
        baseline.native_unwind_info(false);
        baseline.generate_address_map(false);
        // Winch compiles the functions; the trampolines between host and guest are
        // Cranelift's, and were a quarter of clang.wasm's baseline compile. They are
        // a few instructions each: compiled without optimization passes and with the
        // single-pass register allocator, they cost next to nothing to compile.
        baseline.cranelift_opt_level(OptLevel::None);
        baseline.cranelift_regalloc_algorithm(RegallocAlgorithm::SinglePass);
        Ok(Engines {
            optimized: Engine::new(&optimized)?,
            baseline: Engine::new(&baseline)?,
        })
    }

    /// The engine of `tier`.
    pub fn get(&self, tier: Tier) -> &Engine {
        match tier {
            Tier::Baseline => &self.baseline,
            Tier::Optimized => &self.optimized,
        }
    }
}

/// A guest from [`ModuleCache::load_on`].
struct LoadedOn {
    program: Program,
    /// How long compiling it took here (`None`: it was cached, or another process
    /// compiled it).
    compiled_in: Option<Duration>,
    /// How long this process waited for another process's compile of it.
    waited: Option<Duration>,
    /// Its artifact on its way to the cache.
    storing: Option<std::thread::JoinHandle<()>>,
}

/// Where the optimized compile of a module that starts on the baseline tier is done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum UpgradeIn {
    /// A thread of this process, at a low priority ([`Upgrade`]): its program can
    /// replace the baseline one for new guests.
    #[default]
    Thread,
    /// A detached `EXE compile --background --tier optimized EXTRA...` (a `wasm9p`),
    /// started at once, that stores the artifact for later processes; this process
    /// keeps the baseline program. `EXTRA` names the engine settings to compile for
    /// (`--plugin`, `--interruptible`).
    Process {
        /// The `wasm9p` executable.
        exe: PathBuf,
        /// Arguments of `compile` that choose the engine settings.
        extra: Vec<String>,
    },
}

/// A guest loaded on a tier.
pub struct Loaded {
    /// The compiled guest.
    pub program: Program,
    /// The tier it was compiled by (run it with [`Engines::get`] of it).
    pub tier: Tier,
    /// How long compiling it took here (`None`: it was cached, or another process
    /// compiled it).
    pub compiled_in: Option<Duration>,
    /// How long this process waited for another process compiling it (`None`: it did
    /// not wait).
    pub waited: Option<Duration>,
    /// The optimized tier on its way in this process, when this is the baseline one
    /// (and the upgrade is a [`UpgradeIn::Thread`]).
    pub upgrade: Option<Upgrade>,
    /// A detached process was started to compile the optimized tier
    /// ([`UpgradeIn::Process`]).
    pub handed_off: bool,
    /// The artifact of what was compiled here, being written to the cache: join it
    /// before the process ends, or a later run compiles again.
    pub storing: Option<std::thread::JoinHandle<()>>,
}

impl Loaded {
    /// A guest loaded as it was, compiled by no one here: code found cached, or
    /// compiled ahead of time.
    pub fn as_found(program: Program, tier: Tier) -> Loaded {
        Loaded {
            program,
            tier,
            compiled_in: None,
            waited: None,
            upgrade: None,
            handed_off: false,
            storing: None,
        }
    }
}

impl ModuleCache {
    /// Modules from this size up start on the baseline tier under [`TierChoice::Auto`].
    pub const DEFAULT_TIER_FROM: u64 = 4 << 20;

    /// Under [`TierChoice::Auto`], start modules of at least `bytes` on the baseline
    /// tier when their optimized artifact is not cached.
    pub fn tier_from(mut self, bytes: u64) -> Self {
        self.tier_from = bytes;
        self
    }

    /// Loads the guest at `path` on the tier `choice` says (see the module docs),
    /// reporting any compile done before it can run through `progress`; an optimized
    /// compile left to do runs on a thread of this process ([`UpgradeIn::Thread`]).
    pub fn load_tiered(
        &self,
        engines: &Engines,
        path: &Path,
        choice: TierChoice,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Loaded, LoadError> {
        let source = self.source(path)?;
        self.load_tiered_source(engines, source, choice, &UpgradeIn::Thread, progress)
    }

    /// As [`ModuleCache::load_tiered`], for a guest whose bytes the caller knows to have
    /// the SHA-256 `digest` (a content-addressed store names its blobs so): the
    /// compiled code cached for that digest is mapped without the file being opened,
    /// nor even present; without it, the file is loaded as `load_tiered` does. The
    /// caller vouches for the digest: the code run is that of the bytes it names.
    ///
    /// The code looked up is the optimized tier's (the baseline's under
    /// [`TierChoice::Baseline`]): a baseline artifact alone leaves an optimized compile
    /// to start, which needs the bytes.
    pub fn load_tiered_by_digest(
        &self,
        engines: &Engines,
        (path, digest): (&Path, &Digest),
        choice: TierChoice,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Loaded, LoadError> {
        let tier = match choice {
            TierChoice::Baseline => Tier::Baseline,
            TierChoice::Auto | TierChoice::Optimized => Tier::Optimized,
        };
        match self.cached_by_digest(engines.get(tier), digest) {
            Some(program) => Ok(Loaded::as_found(program, tier)),
            None => self.load_tiered(engines, path, choice, progress),
        }
    }

    /// As [`ModuleCache::load_tiered`], for a file that must be a component (a plugin):
    /// a core module is refused before anything is compiled. The optimized compile,
    /// when there is one to do, runs where `upgrade_in` says.
    pub fn load_component_tiered(
        &self,
        engines: &Engines,
        path: &Path,
        choice: TierChoice,
        upgrade_in: &UpgradeIn,
    ) -> Result<Loaded, LoadError> {
        let source = self.source(path)?;
        let not_a_component = || LoadError::Invalid {
            path: path.into(),
            why: "it is not a component".into(),
        };
        if !source.component() {
            return Err(not_a_component());
        }
        let loaded = self.load_tiered_source(engines, source, choice, upgrade_in, &|_| {})?;
        match loaded.program {
            Program::Component(_) => Ok(loaded),
            Program::Module(_) => Err(not_a_component()),
        }
    }

    fn load_tiered_source(
        &self,
        engines: &Engines,
        mut source: Source,
        choice: TierChoice,
        upgrade_in: &UpgradeIn,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Loaded, LoadError> {
        let path = source.path().to_owned();
        let tier = match choice {
            TierChoice::Optimized => Tier::Optimized,
            TierChoice::Baseline => Tier::Baseline,
            TierChoice::Auto if source.len() < self.tier_from => Tier::Optimized,
            TierChoice::Auto => match self.cached(&engines.optimized, &source) {
                Some(program) => return Ok(Loaded::as_found(program, Tier::Optimized)),
                None => Tier::Baseline,
            },
        };
        let (tier, on) = match self.load_on((engines.get(tier), tier), &mut source, progress) {
            // Winch does not take every proposal Cranelift does (exceptions, for
            // setjmp/longjmp and C++): such a guest starts on the optimized tier.
            Err(e) if choice == TierChoice::Auto && tier == Tier::Baseline => {
                tracing::info!(
                    "{}: not on the baseline tier ({e}); compiling it optimized",
                    path.display()
                );
                let optimized =
                    self.load_on((&engines.optimized, Tier::Optimized), &mut source, progress)?;
                (Tier::Optimized, optimized)
            }
            loaded => (tier, loaded?),
        };
        let mut loaded = Loaded {
            program: on.program,
            tier,
            compiled_in: on.compiled_in,
            waited: on.waited,
            upgrade: None,
            handed_off: false,
            storing: on.storing,
        };
        if choice != TierChoice::Auto || tier != Tier::Baseline {
            return Ok(loaded);
        }
        match upgrade_in {
            // The baseline code was cached, so the bytes may not have been read yet.
            UpgradeIn::Thread => match source.into_read() {
                Ok(read) => {
                    loaded.upgrade = Some(Upgrade::start(
                        self.clone(),
                        engines.optimized.clone(),
                        path,
                        read,
                    ))
                }
                Err(e) => tracing::warn!("not compiling the optimized tier: {e}"),
            },
            UpgradeIn::Process { exe, extra } => {
                let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
                match self.compile_detached(exe, &path, source.digest(), &extra) {
                    Ok(started) => loaded.handed_off = started,
                    Err(e) => {
                        tracing::warn!("{}: not compiling the optimized tier: {e}", path.display())
                    }
                }
            }
        }
        Ok(loaded)
    }

    /// Starts `exe compile --background --tier optimized EXTRA... PATH` (a `wasm9p`),
    /// detached in its own process group, to compile and store the optimized tier of
    /// the module at `path` (whose bytes have `digest`, when known) for later runs.
    /// Whether one was started, by this call or an earlier one of this process (one per
    /// module's bytes, cache and settings: a guest that mounts the same big plugin
    /// again and again starts one compile, not one each); not when the cache is off
    /// (nothing would keep the result).
    fn compile_detached(
        &self,
        exe: &Path,
        path: &Path,
        digest: Option<&Digest>,
        extra: &[&str],
    ) -> std::io::Result<bool> {
        use std::os::unix::process::CommandExt;
        type Started = (PathBuf, PathBuf, Option<Digest>, Vec<String>);
        static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());
        let Some(dir) = self.dir() else {
            return Ok(false);
        };
        let key = (
            dir.to_owned(),
            path.to_owned(),
            digest.copied(),
            extra.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
        );
        let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
        if started.contains(&key) {
            return Ok(true);
        }
        let mut child = Command::new(exe)
            .arg("compile")
            .args(["--tier", "optimized", "--background"])
            .args(extra)
            .arg("--module-cache")
            .arg(dir)
            .arg(path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| std::io::Error::other(first_line(&e.to_string())))?;
        // Reaped when it ends, if this process lives that long (a daemon's would be
        // left a zombie otherwise); if this one ends first, init adopts it.
        let _ = std::thread::Builder::new()
            .name("wasm9p-compile-reaper".into())
            .spawn(move || child.wait());
        started.push(key);
        Ok(true)
    }

    /// The guest from the cache for `engine`, or compiled now (and stored later),
    /// one process at a time: a process that finds another compiling it waits for
    /// that artifact (see the module docs).
    fn load_on(
        &self,
        (engine, tier): (&Engine, Tier),
        source: &mut Source,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<LoadedOn, LoadError> {
        let done = |program, waited| LoadedOn {
            program,
            compiled_in: None,
            waited,
            storing: None,
        };
        if let Some(program) = self.cached(engine, source) {
            return Ok(done(program, None));
        }
        if let Some((program, took)) = self.kept_for(engine, (source, tier), progress) {
            return Ok(LoadedOn {
                compiled_in: Some(took),
                ..done(program, None)
            });
        }
        let path = source.path().to_owned();
        let name = file_name(&path);
        let read = source.read()?;
        let waiting = || progress(Progress::Waiting { name: name.clone() });
        self.one_at_a_time(engine, read, &waiting, done, |lock, waited| {
            let started = Instant::now();
            let (program, storing) =
                self.compile_now_store_later(engine, &path, read, progress, lock)?;
            Ok(LoadedOn {
                program,
                compiled_in: Some(started.elapsed()),
                waited,
                storing,
            })
        })
    }

    /// The stored artifact of `bytes` (whose digest is `digest`) for `engine`, as
    /// `found` makes it (with how long this process waited for it), or what `compile`
    /// makes while this process holds the artifact's lock (handed to it, to let go
    /// once the artifact is stored; `None` when there is no lock to be had: a cache
    /// that is off or read-only). `waiting` is called if another process holds the
    /// lock; this one then waits for its artifact, and compiles after all if that
    /// process died without storing it.
    fn one_at_a_time<T>(
        &self,
        engine: &Engine,
        (bytes, digest): (&[u8], Option<&Digest>),
        waiting: &dyn Fn(),
        found: impl Fn(Program, Option<Duration>) -> T,
        compile: impl FnOnce(Option<ArtifactLock>, Option<Duration>) -> Result<T, LoadError>,
    ) -> Result<T, LoadError> {
        let component = is_component(bytes);
        let Some(artifact) = self.artifact_path(engine, digest) else {
            return compile(None, None);
        };
        if let Some(program) = load_artifact(engine, &artifact, component) {
            return Ok(found(program, None));
        }
        let started = Instant::now();
        let said = std::sync::atomic::AtomicBool::new(false);
        let taken = ArtifactLock::take(&artifact, &|| {
            said.store(true, std::sync::atomic::Ordering::Relaxed);
            waiting();
        });
        let waited = said
            .load(std::sync::atomic::Ordering::Relaxed)
            .then(|| started.elapsed());
        let lock = match taken {
            Ok(lock) => lock,
            Err(_) => return compile(None, waited),
        };
        // The artifact appeared while waiting, or just before the lock was taken.
        match load_artifact(engine, &artifact, component) {
            Some(program) => Ok(found(program, waited)),
            None => compile(lock, waited),
        }
    }

    /// Compiles the guest at `path` for `engine` unless its artifact is stored, one
    /// process at a time (see the module docs), at a low priority when `background`.
    /// Returns how long the compile took here (`None`: it was there already, or
    /// another process made it).
    pub fn compile_stored(
        &self,
        engine: &Engine,
        path: &Path,
        background: bool,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Option<Duration>, LoadError> {
        let mut source = self.source(path)?;
        if self.cached(engine, &source).is_some() {
            return Ok(None);
        }
        self.compile_exclusively(engine, path, source.read()?, background, progress, &|| {})
            .map(|(_, took)| took)
    }

    /// The stored artifact of `bytes` (whose digest is `digest`), or compiled (holding
    /// the artifact's lock while another process might be at it), stored and mapped.
    /// `waiting` is called if another process holds the lock (this one then waits for
    /// its artifact).
    fn compile_exclusively(
        &self,
        engine: &Engine,
        path: &Path,
        (bytes, digest): (&[u8], Option<&Digest>),
        background: bool,
        progress: &(dyn Fn(Progress) + Sync),
        waiting: &dyn Fn(),
    ) -> Result<(Program, Option<Duration>), LoadError> {
        let found = |program, _waited| (program, None);
        self.one_at_a_time(engine, (bytes, digest), waiting, found, |_lock, _| {
            let started = Instant::now();
            let program = match background {
                true => in_low_priority_pool(|| {
                    self.compile_and_store(engine, path, bytes, digest, progress)
                }),
                false => crate::huge_alloc::prefault::during(|| {
                    self.compile_and_store(engine, path, bytes, digest, progress)
                }),
            }?;
            Ok((program, Some(started.elapsed())))
        })
    }
}

/// The file name of `path`, as progress reports name a guest.
fn file_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy()
        .into_owned()
}

/// The exclusive lock on an artifact being compiled.
pub(super) struct ArtifactLock {
    path: PathBuf,
    _file: std::fs::File,
}

impl ArtifactLock {
    /// Waits until this process may compile `artifact`: `None` when it appeared
    /// while waiting (someone else compiled it). `waiting` is called once if the lock
    /// is held by another.
    fn take(artifact: &Path, waiting: &dyn Fn()) -> std::io::Result<Option<ArtifactLock>> {
        use rustix::fs::{flock, FlockOperation};
        let path = artifact.with_extension("lock");
        super::create_private_dir(path.parent().unwrap_or(Path::new(".")))?;
        let mut said = false;
        loop {
            let file = {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::File::options()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .mode(0o600)
                    .open(&path)?
            };
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Some(ArtifactLock { path, _file: file })),
                Err(rustix::io::Errno::WOULDBLOCK) if !said => {
                    said = true;
                    waiting();
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {}
                Err(e) => return Err(e.into()),
            }
            drop(file);
            std::thread::sleep(Duration::from_millis(200));
            if artifact.is_file() {
                return Ok(None);
            }
        }
    }
}

impl Drop for ArtifactLock {
    fn drop(&mut self) {
        // Removed while still held: a waiter that locks the removed file finds the
        // artifact next, and a newcomer finds the artifact before any lock.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs `work` with wasmtime's parallel compilation on threads of low priority (and
/// this thread too), so that the guests running meanwhile keep the processors.
fn in_low_priority_pool<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    lower_priority();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("wasm9p-optimize-{i}"))
        .start_handler(|_| lower_priority())
        .build()
    {
        Ok(pool) => pool.install(work),
        Err(_) => work(),
    }
}

/// Nice 10 for the calling thread (on Linux a priority is per thread).
fn lower_priority() {
    let _ = rustix::process::setpriority_process(None, 10);
}

#[derive(Clone)]
enum UpgradeState {
    /// This process compiles it.
    Compiling,
    /// Another process does; this one waits for its artifact.
    Waiting,
    Ready {
        program: Program,
        took: Duration,
    },
    Failed(String),
}

/// A caller's way to finish a program's compile: given the program's path, whether
/// it took the compile on.
pub type HandOffHook = Arc<dyn Fn(&Path) -> std::io::Result<bool> + Send + Sync>;

/// Who finishes an optimized compile that a process ending leaves unfinished.
#[derive(Clone)]
pub enum HandOff {
    /// A detached `EXE compile --background` (a `wasm9p` executable).
    Process(PathBuf),
    /// A caller's hook, given the program's path: whether it took the compile on (a
    /// containerd shim's node side, which outlives the container the guest ran in,
    /// compiles it there for the same engine settings).
    Hook(HandOffHook),
}

impl std::fmt::Debug for HandOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandOff::Process(exe) => write!(f, "HandOff::Process({})", exe.display()),
            HandOff::Hook(_) => f.write_str("HandOff::Hook"),
        }
    }
}

/// The optimized tier of a guest that started on the baseline one, being compiled by a
/// thread of this process.
pub struct Upgrade {
    shared: Arc<(Mutex<UpgradeState>, Condvar)>,
    cache: ModuleCache,
    path: PathBuf,
    digest: Option<Digest>,
}

impl Upgrade {
    fn start(
        cache: ModuleCache,
        engine: Engine,
        path: PathBuf,
        (bytes, digest): (Vec<u8>, Option<Digest>),
    ) -> Upgrade {
        let shared = Arc::new((Mutex::new(UpgradeState::Compiling), Condvar::new()));
        let (job_cache, job_path, job_shared) = (cache.clone(), path.clone(), shared.clone());
        let waiting_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("wasm9p-optimize".into())
            .spawn(move || {
                let started = Instant::now();
                let waiting = || {
                    *waiting_shared.0.lock().unwrap_or_else(|e| e.into_inner()) =
                        UpgradeState::Waiting;
                };
                let state = match job_cache.compile_exclusively(
                    &engine,
                    &job_path,
                    (&bytes, digest.as_ref()),
                    true,
                    &|_| {},
                    &waiting,
                ) {
                    Ok((program, _)) => UpgradeState::Ready {
                        program,
                        took: started.elapsed(),
                    },
                    Err(e) => UpgradeState::Failed(e.to_string()),
                };
                drop(bytes);
                let (lock, changed) = &*job_shared;
                *lock.lock().unwrap_or_else(|e| e.into_inner()) = state;
                changed.notify_all();
            });
        if let Err(e) = spawned {
            *shared.0.lock().unwrap_or_else(|e| e.into_inner()) =
                UpgradeState::Failed(format!("cannot start the compile: {e}"));
        }
        Upgrade {
            shared,
            cache,
            path,
            digest,
        }
    }

    fn state(&self) -> UpgradeState {
        self.shared
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The optimized guest, once compiled (never waits).
    pub fn ready(&self) -> Option<Program> {
        match self.state() {
            UpgradeState::Ready { program, .. } => Some(program),
            _ => None,
        }
    }

    /// How long the optimized compile took (or waited for another process), once done.
    pub fn took(&self) -> Option<Duration> {
        match self.state() {
            UpgradeState::Ready { took, .. } => Some(took),
            _ => None,
        }
    }

    /// Why the optimized compile failed, if it did.
    pub fn failed(&self) -> Option<String> {
        match self.state() {
            UpgradeState::Failed(why) => Some(why),
            _ => None,
        }
    }

    /// Whether it is still being compiled here (not done, failed, nor left to another
    /// process compiling the same code).
    pub fn unfinished(&self) -> bool {
        matches!(self.state(), UpgradeState::Compiling)
    }

    /// Waits for the optimized guest.
    pub fn wait(&self) -> Result<Program, String> {
        let (lock, changed) = &*self.shared;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &*state {
                UpgradeState::Compiling | UpgradeState::Waiting => {
                    state = changed.wait(state).unwrap_or_else(|e| e.into_inner())
                }
                UpgradeState::Ready { program, .. } => return Ok(program.clone()),
                UpgradeState::Failed(why) => return Err(why.clone()),
            }
        }
    }

    /// The process is about to end with its compile unfinished: starts `exe compile
    /// --background` (a `wasm9p`), detached in its own process group, to finish and
    /// store it. Whether one was started (not when the compile is done or failed, when
    /// another process is compiling it, or when the cache is off: nothing would keep
    /// the result).
    /// `extra` arguments go to `compile` (the engine settings it must compile for).
    pub fn hand_off(&self, exe: &Path, extra: &[&str]) -> std::io::Result<bool> {
        if !self.unfinished() {
            return Ok(false);
        }
        self.cache
            .compile_detached(exe, &self.path, self.digest.as_ref(), extra)
    }
}
