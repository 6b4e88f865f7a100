//! `wasm9p worker`: a Remote Workers API bot for a Remote Execution farm (BuildGrid),
//! whose leases run as wasm guests.
//!
//! The farm's logic is `wasm9p-remote`'s: the bot session ([`wasm9p_remote::bots`]),
//! its loop ([`wasm9p_remote::worker`]: leases started, taken back, reported, the
//! scheduler's restarts ridden out) and each action's life
//! ([`wasm9p_remote::action`]). This command parses its arguments, opens the content
//! store and the channels, and gives that logic what runs guests: `wasm9p-runner`'s
//! slots, processes (`wasm9p worker-slot`) that run one guest at a time on
//! `wasm9p-host`'s engine, killed to stop it. The bot id and `--stats` are remote's
//! ([`Bot::kept_id`], [`wasm9p_remote::stats`]).
//!
//! - The bot announces its platform properties (by default `OSFamily=wasi`,
//!   `ISA=wasm32`) and its capacity (`--jobs`). Its id is the same across restarts of
//!   the worker (kept in the cache directory), so a new session gets the leases a
//!   killed worker held requeued.
//! - **SIGTERM or SIGINT:** the loop drains (no new lease; the running ones finish
//!   and are reported), then the worker exits 0.
//! - **`--stats FILE`:** one JSON line per action (blobs and bytes fetched, content
//!   store hits, files of the input root read, 9P requests, load and run times), and
//!   the totals when it stops.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use wasm9p_remote::action::{ActionStats, Actions};
use wasm9p_remote::bots::Bot;
use wasm9p_remote::cas::Cas;
use wasm9p_remote::directories::Directories;
use wasm9p_remote::profiles::Profiles;
use wasm9p_remote::stats::StatsFile;
use wasm9p_remote::store::ContentStore;
use wasm9p_remote::worker::Reports;
use wasm9p_runner::{SlotCommand, SlotConfig, Slots};

use super::shared::{fail, parse_bytes, say, EXIT_USAGE};

/// Bytes of `Directory` messages kept for the actions after (a sysroot's input root
/// has a few hundred of some hundred bytes each).
const DIRECTORIES_KEPT: u64 = 64 << 20;

/// `wasm9p worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The farm's Bots service: grpc://HOST:PORT.
    #[arg(long, value_name = "ADDR")]
    pub scheduler: String,
    /// The farm's instance name.
    #[arg(long, value_name = "NAME", default_value = "")]
    pub instance: String,
    /// The CAS (and ByteStream) service: grpc://HOST:PORT (default: the scheduler's).
    #[arg(long, value_name = "ADDR")]
    pub cas: Option<String>,
    /// Leases run at once (default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub jobs: Option<u16>,
    /// A platform property the bot announces, over the defaults OSFamily=wasi and
    /// ISA=wasm32 (repeatable; the same key replaces the default).
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = super::shared::parse_env)]
    pub properties: Vec<(String, String)>,
    /// The worker's own directory: its content store, compiled modules, bot id,
    /// actions' scratch space (default: ~/.cache/wasm9p/worker).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Where compiled modules are kept (default: the cache directory's `modules`).
    #[arg(long, value_name = "DIR")]
    pub module_cache: Option<PathBuf>,
    /// The most bytes the content store keeps (K, M or G; default 10G).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub cache_size: Option<u64>,
    /// The most bytes of input files' pages, and of the names, listings and
    /// attributes of the input trees, kept in memory for the actions after (K, M or
    /// G; default 512M, shared out among the --jobs slots; 0: each action reads its
    /// inputs afresh).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub page_cache_size: Option<u64>,
    /// The bot's id (default: made once and kept in the cache directory).
    #[arg(long, value_name = "ID")]
    pub bot_id: Option<String>,
    /// Writes a JSON line per action, and the totals at the end, to FILE.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// The most bytes each guest's memory may take (K, M or G; default 4G).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub memory_limit: Option<u64>,
    /// The most bytes an action's outputs may take (K, M or G; default 1G).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_output: Option<u64>,
    /// Neither record which input files actions read nor prefetch them for the next
    /// action of their kind (the profiles are kept in the cache directory's `profiles`).
    #[arg(long)]
    pub no_prefetch: bool,
}

/// The worker's directory: `--cache-dir`, else `~/.cache/wasm9p/worker`.
fn cache_dir(given: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(dir) = given {
        return Ok(dir);
    }
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    match (var("XDG_CACHE_HOME"), var("HOME")) {
        (Some(cache), _) => Ok(Path::new(&cache).join("wasm9p/worker")),
        (_, Some(home)) => Ok(Path::new(&home).join(".cache/wasm9p/worker")),
        _ => Err("no cache directory: give --cache-dir (or set HOME)".into()),
    }
}

/// Runs `wasm9p worker` until SIGTERM or SIGINT (exit 0), or a setup error (exit 2).
pub fn worker(args: WorkerArgs) -> ExitCode {
    type Parts = (
        Arc<Actions<Slots>>,
        Bot,
        tonic::transport::Channel,
        tokio::runtime::Runtime,
    );
    let setup = || -> Result<Parts, String> {
        let dir = cache_dir(args.cache_dir.clone())?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let scheduler = args.scheduler.clone();
        wasm9p_remote::cas::endpoint(&scheduler)?;
        let cas_address = args.cas.clone().unwrap_or_else(|| args.scheduler.clone());
        wasm9p_remote::cas::endpoint(&cas_address)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the runtime: {e}"))?;
        let (bots, cas_channel) = {
            let _in = runtime.enter();
            (
                wasm9p_remote::cas::channel(&scheduler)?,
                wasm9p_remote::cas::channel(&cas_address)?,
            )
        };
        let store = ContentStore::open(&dir.join("cas"), args.cache_size.unwrap_or(10 << 30))
            .map_err(|e| format!("the content store in {}: {e}", dir.join("cas").display()))?;
        let scratch = dir.join("actions");
        let _ = std::fs::remove_dir_all(&scratch); // a killed worker's leftovers
        std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
        let id = match args.bot_id.clone() {
            Some(id) => id,
            None => Bot::kept_id(&dir)?,
        };
        let jobs = args
            .jobs
            .map(usize::from)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let module_cache = args
            .module_cache
            .clone()
            .unwrap_or_else(|| dir.join("modules"));
        let profiles = match args.no_prefetch {
            true => None,
            false => Some(
                Profiles::open(&dir.join("profiles"))
                    .map_err(|e| format!("{}: {e}", dir.join("profiles").display()))?,
            ),
        };
        let actions = Actions {
            cas: Cas::new(cas_channel, &args.instance),
            directories: Directories::new(DIRECTORIES_KEPT),
            store: Arc::new(store),
            guests: Slots::new(
                slot_command(
                    &module_cache,
                    args.page_cache_size.unwrap_or(512 << 20) / jobs as u64,
                )?,
                runtime.handle().clone(),
            )?,
            scratch,
            memory_limit: args.memory_limit.unwrap_or(4 << 30) as usize,
            output_limit: args.max_output.unwrap_or(1 << 30),
            name: id.clone(),
            runtime: runtime.handle().clone(),
            profiles,
        };
        let bot = Bot {
            id,
            instance: args.instance.clone(),
            properties: Bot::properties_over_defaults(&args.properties),
            capacity: jobs,
        };
        Ok((Arc::new(actions), bot, bots, runtime))
    };
    let (actions, bot, channel, runtime) = match setup() {
        Ok(parts) => parts,
        Err(e) => return fail(EXIT_USAGE, &format!("worker: {e}")),
    };
    let stats = match args
        .stats
        .as_ref()
        .map(|path| StatsFile::create(path).map_err(|e| format!("--stats {}: {e}", path.display())))
        .transpose()
    {
        Ok(stats) => stats,
        Err(e) => return fail(EXIT_USAGE, &format!("worker: {e}")),
    };
    let reports = Arc::new(Said { stats });
    say(&format!(
        "worker: bot {} for {} ({} at once, {})",
        bot.id,
        args.scheduler,
        bot.capacity,
        bot.properties
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    let served = runtime.block_on(async {
        let stop = stop_on_signals()?;
        wasm9p_remote::worker::serve(actions.clone(), bot, channel, reports.clone(), stop).await
    });
    if let Some(stats) = &reports.stats {
        let _ = stats.totals();
    }
    actions.guests.finish();
    // The programs' runtimes go outside any async context.
    drop(actions);
    runtime.shutdown_timeout(Duration::from_secs(5));
    match served {
        Ok(()) => {
            say("worker: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &format!("worker: {e}")),
    }
}

/// A message for every SIGTERM or SIGINT (the bot's loop drains on the first).
fn stop_on_signals() -> Result<tokio::sync::mpsc::UnboundedReceiver<()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// Where the loop's news goes: stderr, and `--stats`.
struct Said {
    stats: Option<StatsFile>,
}

impl Reports for Said {
    fn say(&self, line: &str) {
        say(line);
    }

    fn action(&self, took: &ActionStats) {
        if let Some(stats) = &self.stats {
            stats.action(took);
        }
    }
}

/// How the worker starts a slot: this program as `wasm9p worker-slot`.
fn slot_command(module_cache: &Path, page_cache_per_slot: u64) -> Result<SlotCommand, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    Ok(SlotCommand {
        exe,
        args: vec![
            "worker-slot".into(),
            "--module-cache".into(),
            module_cache.into(),
            "--page-cache-size".into(),
            page_cache_per_slot.to_string().into(),
        ],
    })
}

/// `wasm9p worker-slot` (started by `wasm9p worker`, not by hand).
#[derive(Debug, Args)]
pub struct SlotArgs {
    /// Where compiled modules are kept.
    #[arg(long, value_name = "DIR")]
    pub module_cache: PathBuf,
    /// The most bytes of input files' pages and input trees' metadata this slot keeps
    /// for its actions.
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub page_cache_size: u64,
}

/// Runs `wasm9p worker-slot` until its stdin ends (`wasm9p_runner::slot`).
pub fn worker_slot(args: SlotArgs) -> ExitCode {
    let served = wasm9p_runner::serve_slot(SlotConfig {
        module_cache: args.module_cache,
        page_cache_size: args.page_cache_size,
        notes: Arc::new(say),
        hand_off_to: std::env::current_exe().ok(),
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ wasm9p_runner::SlotError::Stdout(_)) => fail(1, &e.to_string()),
        Err(e @ wasm9p_runner::SlotError::BadRequest(_)) => fail(2, &e.to_string()),
    }
}
