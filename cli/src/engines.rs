//! What the guest commands (`run`, `batch`, `cc`, `compile`, `mount`, the worker) share
//! to get code to run: the `--tier` parser, the guest engine as the `wasm9p` binary
//! makes it (its notes and compile progress on stderr, unfinished compiles handed to
//! this executable), the exit code of a setup failure, and the plugin compile
//! settings. It sits below every command module.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::shared::{fail, say, EXIT_USAGE};
use wasm9p_host::engine::{EngineBuilder, GuestEngine, SetupError};
use wasm9p_host::module_cache::{ModuleCache, Progress, TierChoice, UpgradeIn};
use wasm9p_host::plugin::PluginCompile;

pub(crate) fn parse_tier(s: &str) -> Result<TierChoice, String> {
    s.parse()
}

/// The guest engine for the program at `path` with compiled code kept in `cache`, as
/// the commands make it: notes and the progress of a first compile on stderr, and
/// unfinished optimized compiles handed to this executable.
pub(crate) fn engine_for(path: &Path, cache: ModuleCache) -> EngineBuilder {
    let mut builder = GuestEngine::builder(path)
        .module_cache(cache.clone())
        .notes(Arc::new(say))
        .progress(Arc::new(report_progress(cache)));
    if let Ok(exe) = std::env::current_exe() {
        builder = builder.hand_off_compiles_to(exe);
    }
    builder
}

/// The exit code of an engine that could not be made, after its one line: 1 when
/// this process could not start what guests need, 2 for what the user gave (a mount,
/// the program).
pub(crate) fn setup_failed(e: SetupError) -> ExitCode {
    let code = match e {
        SetupError::Runtime(_) => 1,
        SetupError::Mounts(_) | SetupError::Program(_) => EXIT_USAGE,
    };
    fail(code, &e.to_string())
}

/// Progress of a first compile on stderr: announced for modules big enough to take a
/// while (a few MB and up), ticks and the end whenever they come.
pub(super) fn report_progress(cache: ModuleCache) -> impl Fn(Progress) + Send + Sync {
    const ANNOUNCE_FROM: u64 = 4 << 20;
    let announced = std::sync::atomic::AtomicBool::new(false);
    move |progress| match progress {
        Progress::Compiling { name, bytes } if bytes >= ANNOUNCE_FROM => {
            announced.store(true, Ordering::Relaxed);
            let kept = match cache.dir() {
                Some(dir) => format!("kept in {} for later runs", dir.display()),
                None => "not cached (--no-module-cache)".into(),
            };
            say(&format!(
                "compiling {name} ({:.1} MB) for this machine; {kept}",
                bytes as f64 / 1e6
            ));
        }
        Progress::Compiling { .. } => {}
        Progress::Waiting { name } => say(&format!(
            "another process is compiling {name} for this machine; waiting for its code"
        )),
        Progress::StillCompiling(t) => say(&format!("still compiling ({} s)", t.as_secs())),
        Progress::Compiled(t) if announced.load(Ordering::Relaxed) => {
            say(&format!("compiled in {:.1} s", t.as_secs_f64()))
        }
        Progress::Compiled(_) => {}
        Progress::NotStored(why) => say(&format!("compiled module not cached: {why}")),
    }
}

/// `cache` with the size from which modules start on the baseline tier taken from
/// `$WASM9P_TIER_FROM` (bytes) when it is set: for tests, which need small modules to
/// count as big.
pub(super) fn tier_from_env(cache: ModuleCache) -> Result<ModuleCache, ExitCode> {
    match std::env::var("WASM9P_TIER_FROM") {
        Ok(bytes) => Ok(cache.tier_from(bytes.parse().map_err(|_| {
            fail(
                EXIT_USAGE,
                &format!("WASM9P_TIER_FROM={bytes:?}: expected a number of bytes"),
            )
        })?)),
        Err(_) => Ok(cache),
    }
}

/// How `wasm9p mount`'s plugin mounts compile: on `tier`, keeping code in `cache`,
/// and leaving an optimized compile to a detached `wasm9p compile --background
/// --plugin` (this process's plugins stay on the tier they started on; see
/// `wasm9p_host::module_cache::tiers`).
pub(super) fn plugin_compile(cache: ModuleCache, tier: TierChoice) -> PluginCompile {
    let upgrade_in = match std::env::current_exe() {
        Ok(exe) => UpgradeIn::Process {
            exe,
            extra: vec!["--plugin".into()],
        },
        Err(_) => UpgradeIn::Thread,
    };
    PluginCompile {
        cache,
        tier,
        upgrade_in,
    }
}
