//! A task that runs to its end: a preview1 module or a `wasi:cli` component, one
//! guest on wasm9p's engine, as `wasm9p run` runs it.
//!
//! - Its argv and environment are the spec's process's; its stdio is the
//!   container's (ctr's terminal, or a CRI log file). Its working directory is `/`
//!   (see `crate::prepared::say_working_dir_not_applied`).
//! - Its exit code is the task's. A guest that ends otherwise (past its memory bound,
//!   a trap) prints one line saying why and ends the task with 1.
//! - SIGTERM or SIGINT (`ctr task kill`) ends the task at once, with 128 + the
//!   signal as a killed process would (see `crate::signals`).
//! - Compiled code: the node's, fetched read-only (see `crate::broker`), on its tiers
//!   (a big guest whose optimized code is not kept starts on the baseline compiler,
//!   the optimized code compiling in the background while it runs); a program whose
//!   code was not kept is handed to the node side, which compiles and keeps it for the
//!   next container.

use wasm9p_host::engine::{Guest, GuestEngine, Outcome};
use wasm9p_host::module_cache::TierChoice;

use crate::broker::CompileFor;
use crate::prepared::{hand_off, notes, progress, report, say_working_dir_not_applied, Prepared};

/// Runs the task's guest: its exit code.
pub fn run(prepared: Prepared) -> i32 {
    let name = prepared.name();
    let memory = prepared.memory_bound();
    say_working_dir_not_applied();
    let engines = CompileFor::Guest {
        interruptible: false,
    };
    let cache = prepared.module_cache(engines);
    let container_limit = prepared.described.bundle.memory_limit;
    let mut builder = GuestEngine::builder_for(prepared.program)
        .mounts(prepared.mounts)
        .module_cache(cache)
        .tier(TierChoice::Auto)
        .notes(notes())
        .progress(progress());
    if prepared.described.keeps_code {
        builder = builder.hand_off_compiles_with(hand_off(engines));
    }
    let engine = builder.build();
    let engine = match engine {
        Ok(engine) => engine,
        Err(e) => {
            report(&e.to_string());
            return 1;
        }
    };
    let guest = Guest::new(prepared.argv)
        .env(&prepared.env)
        .memory_limit(memory);
    let finished = engine.run(guest);
    let code = match &finished.outcome {
        Outcome::Exited(code) => *code,
        Outcome::MemoryLimit(reached) => {
            let container = container_limit.unwrap_or_default();
            report(&format!(
                "{name}: memory limit: {reached} (the container's {container} bytes, less \
                 what the runtime holds)"
            ));
            i32::from(finished.outcome.exit_code())
        }
        other => {
            report(&format!("{name}: {}", other.reason().unwrap_or_default()));
            i32::from(other.exit_code())
        }
    };
    log::info!(
        "wasm9p: {name} ended with {code} on the {} tier",
        finished.tier.name()
    );
    engine.finish();
    code
}
