//! The guest program on its compiler tiers: each guest starts on the program current
//! when it starts, and the program moves to the optimized tier as soon as its
//! background compile is ready (guests already running finish on theirs).
//!
//! What a loaded program becomes is the caller's: a [`Runner`] for the guest engine
//! (a command), a `wasi:http` proxy for `crate::http`; [`Link`] makes it from the
//! compiled program on the engine of its tier.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Notes, ProgramSource, SetupError};
use crate::module_cache::{
    load_compiled_ahead, Engines, HandOff, Loaded, ModuleCache, Program, Progress, Tier,
    TierChoice, Upgrade,
};
use crate::p1::P1Program;
use crate::p2::P2Program;
use crate::p3::P3Program;

/// What a guest runs as.
pub(crate) enum Runner {
    /// A core module on our preview1.
    P1(P1Program),
    /// A component on WASI 0.2 or 0.3 (an async engine).
    Component(ComponentProgram),
}

/// A component, by the `wasi:cli/run` it exports.
pub(crate) enum ComponentProgram {
    /// `wasi:cli/run@0.2.x`.
    P2(P2Program),
    /// `wasi:cli/run@0.3.x`.
    P3(P3Program),
}

impl ComponentProgram {
    /// Runs the component over `ctx`: its exit status.
    pub(crate) async fn run(&self, ctx: crate::p2::WasiP2Ctx) -> wasmtime::Result<i32> {
        match self {
            ComponentProgram::P2(program) => program.run(ctx).await,
            ComponentProgram::P3(program) => program.run(ctx).await,
        }
    }
}

/// A runner and the tier its code came from.
pub(crate) struct OnTier<R = Runner> {
    pub(crate) runner: R,
    pub(crate) tier: Tier,
}

/// Makes what guests run from a compiled program, on the engine of its tier; the
/// error is one line.
pub(crate) type Link<R> =
    Box<dyn Fn(&wasmtime::Engine, Program) -> Result<R, SetupError> + Send + Sync>;

/// The guest program, on the tier it has reached.
pub(crate) struct TieredProgram<R = Runner> {
    path: PathBuf,
    engines: Engines,
    link: Link<R>,
    current: Mutex<Arc<OnTier<R>>>,
    upgrade: Option<Upgrade>,
    started_on: Tier,
    compiled_in: Option<Duration>,
    /// How long loading waited for another process compiling the first tier.
    waited: Option<Duration>,
    /// Guests started on each tier: baseline, optimized.
    guests: [AtomicU64; 2],
    /// The artifact compiled here, being stored.
    storing: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The engines have epoch interruption (a hand-off must compile for those).
    interruptible: bool,
}

/// A link error about the program at `path`, in one line.
pub(crate) fn link_error(path: &Path, e: wasmtime::Error) -> SetupError {
    let why = format!("{e:#}");
    SetupError::Program(format!(
        "cannot link {}: {}",
        path.display(),
        why.lines().next().unwrap_or_default()
    ))
}

/// How the guest engine links a program: a preview1 module or a command component
/// (`components_only`: a core module is refused, as run-time mounts need a component).
pub(crate) fn runner(path: &Path, components_only: bool) -> Link<Runner> {
    let path = path.to_owned();
    Box::new(move |engine, program| command(engine, program, &path, components_only))
}

fn command(
    engine: &wasmtime::Engine,
    program: Program,
    path: &Path,
    components_only: bool,
) -> Result<Runner, SetupError> {
    let link_error = |e: wasmtime::Error| link_error(path, e);
    match program {
        Program::Module(_) if components_only => Err(SetupError::Program(format!(
            "--allow-mount: {} is a preview1 module; mounting at run time \
             (wasm9p:fs/mounts) is for components",
            path.display()
        ))),
        Program::Module(module) => Ok(Runner::P1(
            P1Program::new(engine, &module).map_err(link_error)?,
        )),
        Program::Component(component) if crate::p3::exports_p3_run(engine, &component) => {
            Ok(Runner::Component(ComponentProgram::P3(
                P3Program::new(engine, &component).map_err(link_error)?,
            )))
        }
        Program::Component(component) => Ok(Runner::Component(ComponentProgram::P2(
            P2Program::new(engine, &component).map_err(link_error)?,
        ))),
    }
}

impl<R> TieredProgram<R> {
    /// Loads the guest `source` gives on the tier `tier` says (code compiled ahead:
    /// the optimized tier, as it is), on `engines` (interruptible: they have epoch
    /// interruption, and are ticked from now on), linked by `link`, telling `progress`
    /// how a first compile goes.
    pub(crate) fn load(
        cache: &ModuleCache,
        source: &ProgramSource,
        tier: TierChoice,
        (engines, interruptible): (Engines, bool),
        link: Link<R>,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<TieredProgram<R>, SetupError> {
        if interruptible {
            // Their guests may be stopped mid-computation: keep their epochs moving.
            for tier in [Tier::Baseline, Tier::Optimized] {
                crate::interrupt::tick(engines.get(tier));
            }
        }
        let path = source.path();
        let loaded = match source {
            ProgramSource::File {
                digest: Some(digest),
                ..
            } => cache.load_tiered_by_digest(&engines, (path, digest), tier, progress),
            ProgramSource::File { digest: None, .. } => {
                cache.load_tiered(&engines, path, tier, progress)
            }
            ProgramSource::CompiledAhead { name, code } => {
                load_compiled_ahead(engines.get(Tier::Optimized), name, code)
                    .map(|program| Loaded::as_found(program, Tier::Optimized))
            }
        }
        .map_err(|e| SetupError::Program(with_hint(e.to_string())))?;
        let first = link(engines.get(loaded.tier), loaded.program)?;
        Ok(TieredProgram {
            path: path.to_owned(),
            current: Mutex::new(Arc::new(OnTier {
                runner: first,
                tier: loaded.tier,
            })),
            engines,
            link,
            upgrade: loaded.upgrade,
            started_on: loaded.tier,
            compiled_in: loaded.compiled_in,
            waited: loaded.waited,
            guests: Default::default(),
            storing: Mutex::new(loaded.storing),
            interruptible,
        })
    }

    /// The program the next guest starts on: the optimized one once it is ready.
    pub(crate) fn next(&self) -> Arc<OnTier<R>> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.tier == Tier::Baseline {
            if let Some(program) = self.upgrade.as_ref().and_then(Upgrade::ready) {
                let engine = self.engines.get(Tier::Optimized);
                // Linking the optimized code cannot fail where the baseline's did not;
                // if it does, the guests stay on the baseline tier.
                if let Ok(runner) = (self.link)(engine, program) {
                    *current = Arc::new(OnTier {
                        runner,
                        tier: Tier::Optimized,
                    });
                }
            }
        }
        let index = match current.tier {
            Tier::Baseline => 0,
            Tier::Optimized => 1,
        };
        self.guests[index].fetch_add(1, Ordering::Relaxed);
        current.clone()
    }

    /// The end of the run: the artifact compiled here is stored, and an optimized
    /// compile still going is handed to a detached `EXE compile --background` when
    /// `hand_off_to` names a `wasm9p` executable, so that the next run has both
    /// (without one it is left unfinished). What happened is told to `notes`.
    pub(crate) fn finish(&self, hand_off_to: Option<&HandOff>, notes: &Notes) {
        let storing = self
            .storing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(storing) = storing {
            let _ = storing.join();
        }
        let Some(upgrade) = &self.upgrade else {
            return;
        };
        if let Some(why) = upgrade.failed() {
            notes(&format!(
                "{}: the optimized compile failed: {why}",
                self.path.display()
            ));
            return;
        }
        let Some(hand_off) = hand_off_to else {
            return;
        };
        let extra: &[&str] = if self.interruptible {
            &["--interruptible"]
        } else {
            &[]
        };
        let handed = match hand_off {
            HandOff::Process(exe) => upgrade.hand_off(exe, extra),
            HandOff::Hook(hook) if upgrade.unfinished() => hook(&self.path),
            HandOff::Hook(_) => Ok(false),
        };
        match handed {
            Ok(true) => notes(&format!(
                "{}: its optimized code is being compiled in the background for later runs",
                self.path.display()
            )),
            Ok(false) => {}
            Err(e) => notes(&format!(
                "{}: cannot finish the optimized compile in the background: {e}",
                self.path.display()
            )),
        }
    }

    /// The `tier` entry of `--stats`: the tier the first guest started on, how long
    /// compiles took here (null: cached, compiled by another process, or not done),
    /// how long loading waited for another process compiling the first tier (null:
    /// it did not wait), and guests by tier.
    pub(crate) fn stats_json(&self) -> serde_json::Value {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis() as u64);
        let optimized_ms = match self.started_on {
            Tier::Optimized => ms(self.compiled_in),
            Tier::Baseline => ms(self.upgrade.as_ref().and_then(Upgrade::took)),
        };
        let baseline_ms = match self.started_on {
            Tier::Baseline => ms(self.compiled_in),
            Tier::Optimized => None,
        };
        serde_json::json!({
            "started_on": self.started_on.name(),
            "baseline_compile_ms": baseline_ms,
            "optimized_compile_ms": optimized_ms,
            "waited_for_compile_ms": ms(self.waited),
            "guests": {
                "baseline": self.guests[0].load(Ordering::Relaxed),
                "optimized": self.guests[1].load(Ordering::Relaxed),
            },
        })
    }
}

impl TieredProgram<Runner> {
    /// Whether its guests are preview1 modules (not components).
    pub(crate) fn runs_modules(&self) -> bool {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        matches!(current.runner, Runner::P1(_))
    }
}

/// The engines guests run on, one per tier; `interruptible`: with epoch interruption,
/// so that a cancelled guest stops at once (see `crate::interrupt`), at the price of
/// a check in every loop and call of its code.
pub fn guest_engines(interruptible: bool) -> Result<Engines, SetupError> {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(interruptible);
    Engines::new(&config)
        .map_err(|e| SetupError::Runtime(format!("cannot make the engines: {e:#}")))
}

/// A load error, with what to do about the one a user is likeliest to meet: LLVM
/// emits the legacy exception-handling instructions (`try`, `catch`) for
/// `-mllvm -wasm-enable-sjlj` and `-fwasm-exceptions` unless told otherwise, and
/// wasmtime runs only the standard ones (`try_table`, `exnref`).
fn with_hint(error: String) -> String {
    if error.contains("legacy_exceptions") {
        return format!(
            "{error} (this module uses the legacy exception-handling instructions, which \
             wasmtime does not run; rebuild it with `-mllvm -wasm-use-legacy-eh=false`)"
        );
    }
    error
}
