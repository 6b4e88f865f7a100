//! What the guest commands (`run`, `batch`, `cc`, `compile`, `mount`, `http`) share to
//! get code to run, over `wasm9p_host::engine`'s presets for a tool: the `--tier`
//! parser, the engine as this binary makes it (its lines on stderr, unfinished
//! compiles handed to this executable), and the exit code of a setup failure.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use super::shared::{fail, say, EXIT_USAGE};
use wasm9p_host::engine::{EngineBuilder, Notes, SetupError};
use wasm9p_host::module_cache::{ModuleCache, Progress, TierChoice};
use wasm9p_host::plugin::PluginCompile;

pub(crate) fn parse_tier(s: &str) -> Result<TierChoice, String> {
    s.parse()
}

/// Where this binary's notes go: stderr, one `wasm9p: ` line each.
fn said() -> Notes {
    Arc::new(say)
}

/// The guest engine for the program at `path` with compiled code kept in `cache`, as
/// the commands make it: notes and the progress of a first compile on stderr, and
/// unfinished optimized compiles handed to this executable.
pub(crate) fn engine_for(path: &Path, cache: ModuleCache) -> EngineBuilder {
    EngineBuilder::for_tool(path, cache, said(), std::env::current_exe().ok())
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

/// Progress of a first compile on stderr.
pub(super) fn report_progress(cache: ModuleCache) -> impl Fn(Progress) + Send + Sync {
    wasm9p_host::engine::progress_lines(cache, said())
}

/// `cache` with the baseline tier's threshold from `$WASM9P_TIER_FROM`; a bad value
/// is a usage error.
pub(super) fn tier_from_env(cache: ModuleCache) -> Result<ModuleCache, ExitCode> {
    wasm9p_host::engine::tier_from_env(cache).map_err(|e| fail(EXIT_USAGE, &e))
}

/// How `wasm9p mount`'s plugin mounts compile: on `tier`, keeping code in `cache`,
/// leaving an optimized compile to a detached `wasm9p compile --background --plugin`.
pub(super) fn plugin_compile(cache: ModuleCache, tier: TierChoice) -> PluginCompile {
    PluginCompile::for_tool(cache, tier, std::env::current_exe().ok())
}
