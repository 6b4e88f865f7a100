//! The engine as a command-line tool makes it, for every program that runs guests the
//! way `wasm9p`'s commands do (`run`, `batch`, `cc` and its daemon, `compile`, `mount`,
//! the farm's slot processes): its notes and a first compile's progress said in lines
//! ([`progress_lines`]), unfinished optimized compiles handed to an executable
//! ([`EngineBuilder::for_tool`], [`PluginCompile::for_tool`]), and the baseline tier's
//! threshold taken from `$WASM9P_TIER_FROM` ([`tier_from_env`]).
//!
//! What is the tool's own stays with it: where a line goes (stderr, a log) and what
//! exit code a failure gets.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{EngineBuilder, GuestEngine, Notes};
use crate::module_cache::{ModuleCache, Progress, TierChoice, UpgradeIn};
use crate::plugin::PluginCompile;

/// Modules from this size up have their first compile announced (it takes a while).
const ANNOUNCE_FROM: u64 = 4 << 20;

/// A first compile's progress as lines to `say`: announced for modules big enough to
/// take a while (with where the code is kept, from `cache`), then its ticks and its
/// end; another process's compile waited for, and code that could not be kept,
/// whatever the size.
pub fn progress_lines(cache: ModuleCache, say: Notes) -> impl Fn(Progress) + Send + Sync {
    let announced = AtomicBool::new(false);
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

impl EngineBuilder {
    /// The engine for the program at `path` with compiled code kept in `cache`, as a
    /// command-line tool makes it: notes and a first compile's progress to `say`
    /// ([`progress_lines`]), unfinished optimized compiles handed to `exe` (a `wasm9p`
    /// executable: `wasm9p compile --background`) when there is one.
    pub fn for_tool(
        path: &Path,
        cache: ModuleCache,
        say: Notes,
        exe: Option<PathBuf>,
    ) -> EngineBuilder {
        let builder = GuestEngine::builder(path)
            .module_cache(cache.clone())
            .notes(say.clone())
            .progress(Arc::new(progress_lines(cache, say)));
        match exe {
            Some(exe) => builder.hand_off_compiles_to(exe),
            None => builder,
        }
    }
}

impl PluginCompile {
    /// How a tool's plugin mounts compile: on `tier`, keeping code in `cache`, and
    /// leaving an optimized compile to a detached `exe compile --background --plugin`
    /// when there is an `exe` (else to a thread of this process). A process's plugins
    /// stay on the tier they started on (see `crate::module_cache::tiers`).
    pub fn for_tool(cache: ModuleCache, tier: TierChoice, exe: Option<PathBuf>) -> PluginCompile {
        let upgrade_in = match exe {
            Some(exe) => UpgradeIn::Process {
                exe,
                extra: vec!["--plugin".into()],
            },
            None => UpgradeIn::Thread,
        };
        PluginCompile {
            cache,
            tier,
            upgrade_in,
        }
    }
}

/// `cache` with the size from which modules start on the baseline tier taken from
/// `$WASM9P_TIER_FROM` (bytes) when it is set (tests need small modules to count as
/// big); a value that is not a number is an error of one line.
pub fn tier_from_env(cache: ModuleCache) -> Result<ModuleCache, String> {
    match std::env::var("WASM9P_TIER_FROM") {
        Ok(bytes) => match bytes.parse() {
            Ok(from) => Ok(cache.tier_from(from)),
            Err(_) => Err(format!(
                "WASM9P_TIER_FROM={bytes:?}: expected a number of bytes"
            )),
        },
        Err(_) => Ok(cache),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;

    fn heard(progress: &[Progress]) -> Vec<String> {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let into = lines.clone();
        let say: Notes = Arc::new(move |line: &str| into.lock().unwrap().push(line.to_owned()));
        let report = progress_lines(ModuleCache::at("/var/cache/m"), say);
        for p in progress {
            report(p.clone());
        }
        let said = lines.lock().unwrap().clone();
        said
    }

    #[test]
    fn a_big_first_compile_is_announced_ticked_and_ended_and_a_small_one_is_quiet() {
        let big = heard(&[
            Progress::Compiling {
                name: "clang.wasm".into(),
                bytes: 75_000_000,
            },
            Progress::StillCompiling(Duration::from_secs(10)),
            Progress::Compiled(Duration::from_millis(21_500)),
        ]);
        assert_eq!(
            big,
            [
                "compiling clang.wasm (75.0 MB) for this machine; kept in /var/cache/m for later runs",
                "still compiling (10 s)",
                "compiled in 21.5 s",
            ]
        );
        let small = heard(&[
            Progress::Compiling {
                name: "hello.wasm".into(),
                bytes: 40_000,
            },
            Progress::Compiled(Duration::from_millis(80)),
        ]);
        assert!(small.is_empty(), "{small:?}");
        let waited = heard(&[Progress::Waiting {
            name: "hello.wasm".into(),
        }]);
        assert_eq!(
            waited,
            ["another process is compiling hello.wasm for this machine; waiting for its code"]
        );
    }
}
