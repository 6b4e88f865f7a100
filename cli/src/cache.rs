//! `wasm9p cache ls|clear`: the `cache=fscache` stores on this machine (see
//! [`wasm9p_guest_fs::fscache`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use wasm9p_guest_fs::fscache;

use super::shared::{fail, EXIT_USAGE};

/// `wasm9p cache`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: CacheAction,
}

/// What `wasm9p cache` does.
#[derive(Debug, Subcommand)]
pub enum CacheAction {
    /// List the stores: tag, bytes on disk, records, pages, last use.
    Ls(StoreChoice),
    /// Remove the stores (or the one tagged --cachetag).
    Clear(StoreChoice),
}

/// Which stores.
#[derive(Debug, Args)]
pub struct StoreChoice {
    /// Only the store of this `cachetag` (for a mount without one: `ADDR ANAME` of a
    /// remote server, `export:DIR` of an embedded one).
    #[arg(long, value_name = "NAME")]
    pub cachetag: Option<String>,
    /// Where the stores are (default: $WASM9P_FSCACHE_DIR, else
    /// $XDG_CACHE_HOME/wasm9p/fscache, else ~/.cache/wasm9p/fscache).
    #[arg(long, value_name = "DIR")]
    pub fscache_dir: Option<PathBuf>,
}

/// Runs `wasm9p cache`.
pub fn cache(args: CacheArgs) -> ExitCode {
    let (CacheAction::Ls(choice) | CacheAction::Clear(choice)) = &args.action;
    let Some(root) = choice.fscache_dir.clone().or_else(fscache::default_dir) else {
        return fail(
            EXIT_USAGE,
            "no store directory: give --fscache-dir (or set $WASM9P_FSCACHE_DIR, $XDG_CACHE_HOME or $HOME)",
        );
    };
    let tag = choice.cachetag.as_deref();
    let result = match &args.action {
        CacheAction::Ls(_) => fscache::stores(&root).map(|all| {
            let listed: Vec<_> = all
                .iter()
                .filter(|s| tag.is_none_or(|t| t == s.tag))
                .collect();
            if listed.is_empty() {
                // On stderr: stdout stays one line per store for scripts.
                eprintln!("wasm9p cache: no store under {}", root.display());
            }
            for s in listed {
                println!(
                    "{}\t{} bytes\t{} records\t{} pages\tused {}\t{}",
                    s.tag,
                    s.bytes,
                    s.records,
                    s.pages,
                    s.used,
                    s.dir.display()
                );
            }
        }),
        CacheAction::Clear(_) => fscache::clear(&root, tag).map(|gone| {
            for s in &gone {
                println!("removed {} ({} bytes)", s.tag, s.bytes);
            }
            if gone.is_empty() {
                println!("no store to remove under {}", root.display());
            }
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &format!("{}: {e}", root.display())),
    }
}
