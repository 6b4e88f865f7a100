//! `wasm9p compile`: fills the module cache ahead of time (images, CI warm-up), for
//! guests or (`--plugin`) for plugin mounts, and finishes a run's unfinished optimized
//! compile when handed off (`--background`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::engines::{parse_tier, report_progress, setup_failed};
use super::shared::{fail, say, EXIT_USAGE};
use wasm9p_host::engine::guest_engines;
use wasm9p_host::module_cache::{ModuleCache, Tier, TierChoice};

/// `wasm9p compile`.
#[derive(Debug, Args)]
pub struct CompileArgs {
    /// Which tiers: auto (both), baseline (Winch) or optimized (Cranelift).
    #[arg(long, value_name = "TIER", default_value = "auto", value_parser = parse_tier)]
    pub tier: TierChoice,
    /// The cache to fill (default: $WASM9P_CACHE_DIR, else
    /// $XDG_CACHE_HOME/wasm9p/modules, else ~/.cache/wasm9p/modules).
    #[arg(long, value_name = "DIR")]
    pub module_cache: Option<PathBuf>,
    /// Compile at a low priority and print nothing (how `run` and `batch` hand off an
    /// optimized compile they could not finish).
    #[arg(long)]
    pub background: bool,
    /// For engines that stop a cancelled guest at once (epoch interruption, what
    /// `wasm9p daemon --prompt-cancel` runs; its code is about 12-15 % slower).
    #[arg(long, hide = true, conflicts_with = "plugin")]
    pub interruptible: bool,
    /// Compile for plugin mounts (`type=plugin`): their engines meter fuel, so their
    /// code is not a guest's.
    #[arg(long)]
    pub plugin: bool,
    /// Modules or components to compile.
    #[arg(required = true, value_name = "MODULE")]
    pub modules: Vec<PathBuf>,
}

/// `wasm9p compile`: 0 when every module is in the cache at every tier asked for, 2
/// when one could not be read or compiled.
pub fn compile(args: CompileArgs) -> ExitCode {
    let cache = match &args.module_cache {
        Some(dir) => ModuleCache::at(dir),
        None => ModuleCache::user_default(),
    };
    if cache.dir().is_none() {
        return fail(
            EXIT_USAGE,
            "no module cache to fill: give --module-cache DIR (or set WASM9P_CACHE_DIR or HOME)",
        );
    }
    let engines = match args.plugin {
        true => wasm9p_host::plugin::engines()
            .map_err(|e| fail(1, &format!("cannot make the engines: {e}"))),
        false => guest_engines(args.interruptible).map_err(setup_failed),
    };
    let engines = match engines {
        Ok(engines) => engines,
        Err(code) => return code,
    };
    let tiers: &[Tier] = match args.tier {
        TierChoice::Auto => &[Tier::Baseline, Tier::Optimized],
        TierChoice::Baseline => &[Tier::Baseline],
        TierChoice::Optimized => &[Tier::Optimized],
    };
    let progress = report_progress(cache.clone());
    let mut failed = false;
    for module in &args.modules {
        for &tier in tiers {
            let quiet = |_| {};
            let progress: &(dyn Fn(_) + Sync) = if args.background { &quiet } else { &progress };
            match cache.compile_stored(engines.get(tier), module, args.background, progress) {
                Ok(_) if args.background => {}
                Ok(Some(took)) => say(&format!(
                    "{} ({}): compiled in {:.1} s",
                    module.display(),
                    tier.name(),
                    took.as_secs_f64()
                )),
                Ok(None) => say(&format!("{} ({}): cached", module.display(), tier.name())),
                Err(e) => {
                    if !args.background {
                        say(&e.to_string());
                    }
                    failed = true;
                }
            }
        }
    }
    ExitCode::from(if failed { EXIT_USAGE } else { 0 })
}
