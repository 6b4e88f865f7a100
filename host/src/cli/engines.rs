//! What the guest commands (`run`, `batch`, `cc`, `compile`, the worker) share to
//! get code to run: the `--tier` parser, the engines, and the progress lines of the
//! module cache. It sits below every command module, so none of them imports another.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use super::{fail, say};
use crate::module_cache::{Engines, ModuleCache, Progress, TierChoice};

pub(crate) fn parse_tier(s: &str) -> Result<TierChoice, String> {
    s.parse()
}

/// The engines guests run on, one per tier; `interruptible`: with epoch interruption,
/// so that a cancelled guest stops at once (see `crate::interrupt`), at the price of
/// a check in every loop and call of its code.
pub(crate) fn guest_engines(interruptible: bool) -> Result<Engines, ExitCode> {
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(interruptible);
    Engines::new(&config).map_err(|e| fail(1, &format!("cannot make the engines: {e:#}")))
}

/// Progress of a first compile on stderr: announced for modules big enough to take a
/// while (a few MB and up), ticks and the end whenever they come.
pub(super) fn report_progress(cache: &ModuleCache) -> impl Fn(Progress) + Sync + '_ {
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
