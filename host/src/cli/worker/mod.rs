//! `wasm9p worker`: a Remote Workers API bot for a Remote Execution farm (BuildGrid),
//! whose leases run as wasm guests.
//!
//! The bot ([`wasm9p_remote::bots`]) announces its platform properties (by default
//! `OSFamily=wasi`, `ISA=wasm32`) and its capacity (`--jobs`), then updates its session
//! in a long poll: the scheduler's answers give it leases to run and take leases back
//! ([`wasm9p_remote::lease`]). Each lease runs on a thread of its own (`action`); when
//! one ends, the poll in flight is dropped and its result reported at once (the
//! scheduler gives any lease it had assigned meanwhile again in its next answer).
//! While every slot is busy the bot reports its leases every [`BUSY_HEARTBEAT`] (the
//! scheduler answers at once then), which is how a taken-back lease is noticed: its
//! guest is stopped within about a second (the guests' engines are interruptible).
//!
//! - **The scheduler goes away** (restarted, unreachable): the bot retries, with a
//!   back-off up to [`MAX_BACKOFF`], and makes a new session when the old one is not
//!   known any more. Its id is the same across restarts of the worker (kept in the
//!   cache directory), so a new session gets the leases a killed worker held requeued.
//! - **SIGTERM or SIGINT:** no new lease is taken (the bot says BOT_TERMINATING, and a
//!   lease offered anyway is handed back UNAVAILABLE, which the scheduler retries
//!   elsewhere), the running ones finish and are reported, then it exits 0.
//! - **`--stats FILE`:** one JSON line per action (blobs and bytes fetched, content
//!   store hits, files of the input root read, 9P requests, load and run times), and
//!   the totals when it stops.

mod action;
mod tools;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use wasm9p_remote::apis::workers::BotStatus;
use wasm9p_remote::bots::{Bot, Session};
use wasm9p_remote::cas::Cas;
use wasm9p_remote::directories::Directories;
use wasm9p_remote::lease::{Event, Leases, Outcome};
use wasm9p_remote::store::ContentStore;

use super::{fail, say, EXIT_USAGE};
use action::{ActionStats, Shared, Work};

/// How long one update may wait for the scheduler's answer.
const POLL: Duration = Duration::from_secs(20);
/// Bytes of `Directory` messages kept for the actions after (a sysroot's input root
/// has a few hundred of some hundred bytes each).
const DIRECTORIES_KEPT: u64 = 64 << 20;
/// How often a bot with no room reports its leases.
pub const BUSY_HEARTBEAT: Duration = Duration::from_secs(1);
/// The longest wait between tries to reach the scheduler.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);

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
    #[arg(long = "property", value_name = "KEY=VALUE", value_parser = super::parse_env)]
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
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    wasm9p_guest_fs::mount_options::parse_bytes(s)
        .ok_or_else(|| format!("{s:?}: expected a number of bytes (with K, M or G)"))
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

/// The bot's id: `given`, else the one kept in `dir`, made the first time.
fn bot_id(given: Option<String>, dir: &Path) -> Result<String, String> {
    if let Some(id) = given {
        return Ok(id);
    }
    let file = dir.join("bot-id");
    if let Ok(id) = std::fs::read_to_string(&file) {
        if !id.trim().is_empty() {
            return Ok(id.trim().to_owned());
        }
    }
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let id = format!(
        "wasm9p-{host}-{:x}",
        (nanos as u64) ^ u64::from(std::process::id())
    );
    std::fs::write(&file, format!("{id}\n"))
        .map_err(|e| format!("cannot keep the bot id in {}: {e}", file.display()))?;
    Ok(id)
}

/// The platform properties: the defaults, with `given` over them (a key given
/// replaces the default's value; several values of one key are all announced).
fn properties(given: &[(String, String)]) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = [("OSFamily", "wasi"), ("ISA", "wasm32")]
        .into_iter()
        .filter(|(key, _)| !given.iter().any(|(g, _)| g == key))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    for pair in given {
        if !all.contains(pair) {
            all.push(pair.clone());
        }
    }
    all
}

/// Runs `wasm9p worker` until SIGTERM or SIGINT (exit 0), or a setup error (exit 2).
pub fn worker(args: WorkerArgs) -> ExitCode {
    let setup = || -> Result<(Arc<Shared>, Bot, tonic::transport::Channel, tokio::runtime::Runtime), String> {
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
        let id = bot_id(args.bot_id.clone(), &dir)?;
        let jobs = args
            .jobs
            .map(usize::from)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let shared = Shared {
            cas: Cas::new(cas_channel, &args.instance),
            directories: Directories::new(DIRECTORIES_KEPT),
            store: Arc::new(store),
            tools: tools::Tools::new(
                args.module_cache
                    .clone()
                    .unwrap_or_else(|| dir.join("modules")),
            ),
            scratch,
            memory_limit: args.memory_limit.unwrap_or(4 << 30) as usize,
            output_limit: args.max_output.unwrap_or(1 << 30),
            name: id.clone(),
            runtime: runtime.handle().clone(),
        };
        let bot = Bot {
            id,
            instance: args.instance.clone(),
            properties: properties(&args.properties),
            capacity: jobs,
        };
        Ok((Arc::new(shared), bot, bots, runtime))
    };
    let (shared, bot, channel, runtime) = match setup() {
        Ok(parts) => parts,
        Err(e) => return fail(EXIT_USAGE, &format!("worker: {e}")),
    };
    let stats = match args.stats.as_ref().map(Stats::open).transpose() {
        Ok(stats) => stats.map(Arc::new),
        Err(e) => return fail(EXIT_USAGE, &format!("worker: {e}")),
    };
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
    let served = runtime.block_on(serve(shared.clone(), bot, channel, stats.clone()));
    if let Some(stats) = &stats {
        stats.totals();
    }
    shared.tools.finish();
    // The programs' runtimes go outside any async context.
    drop(shared);
    runtime.shutdown_timeout(Duration::from_secs(5));
    match served {
        Ok(()) => {
            say("worker: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &format!("worker: {e}")),
    }
}

/// The bot's loop: updates, leases started and stopped, results reported.
async fn serve(
    shared: Arc<Shared>,
    bot: Bot,
    channel: tonic::transport::Channel,
    stats: Option<Arc<Stats>>,
) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Outcome)>();
    let mut leases = Leases::new(bot.capacity);
    let mut running: HashMap<String, Arc<AtomicBool>> = HashMap::new();
    let mut session: Option<Session> = None;
    let mut backoff = Duration::from_millis(100);
    // Whether the scheduler has stopped answering (see `unanswered`).
    let mut lost = false;
    // The scheduler's last answer, not yet taken in (none when an update was dropped
    // for a lease that ended: no answer is not an empty one).
    let mut offered: Option<Vec<wasm9p_remote::apis::workers::Lease>> = None;
    loop {
        // What the last answer asked for.
        let events = offered.take().map(|answer| leases.sync(&answer));
        for event in events.into_iter().flatten() {
            match event {
                Event::Start { id, payload } => {
                    let cancel = Arc::new(AtomicBool::new(false));
                    running.insert(id.clone(), cancel.clone());
                    start(
                        shared.clone(),
                        Work {
                            id,
                            payload,
                            cancel,
                        },
                        done_tx.clone(),
                        stats.clone(),
                    );
                }
                Event::Stop { id } => {
                    if let Some(cancel) = running.remove(&id) {
                        cancel.store(true, Ordering::Relaxed);
                        say(&format!(
                            "worker: lease {id} taken back; its guest is stopped"
                        ));
                    }
                }
            }
        }
        if leases.draining() && leases.is_empty() && running.is_empty() {
            return Ok(());
        }
        let Some(current) = session.as_mut() else {
            match Session::create(channel.clone(), &bot, POLL).await {
                Ok((made, first)) => {
                    answered(&mut lost);
                    say(&format!("worker: session {}", made.name()));
                    session = Some(made);
                    offered = Some(first);
                    backoff = Duration::from_millis(100);
                }
                Err(e) => {
                    tracing::debug!("CreateBotSession: {e}");
                    unanswered(&mut lost, &e);
                    if leases.draining() && running.is_empty() {
                        return Ok(()); // nothing to report to a scheduler that is gone
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        Some((id, outcome)) = done_rx.recv() => {
                            running.remove(&id);
                            leases.complete(&id, outcome);
                        }
                        _ = term.recv() => leases.drain(),
                        _ = int.recv() => leases.drain(),
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            continue;
        };
        let status = match leases.draining() {
            true => BotStatus::BotTerminating,
            false => BotStatus::Ok,
        };
        let busy = leases.draining() || running.len() >= bot.capacity;
        let report = leases.report();
        tracing::debug!(
            "update: {:?}",
            report.iter().map(|l| (&l.id, l.state)).collect::<Vec<_>>()
        );
        let update = current.update(status, report, POLL);
        tokio::select! {
            answer = update => match answer {
                Ok(answer) => {
                    answered(&mut lost);
                    tracing::debug!(
                        "answer: {:?}",
                        answer.iter().map(|l| (&l.id, l.state)).collect::<Vec<_>>()
                    );
                    offered = Some(answer);
                    backoff = Duration::from_millis(100);
                    if busy {
                        // The scheduler answers at once then: report again soon, or
                        // as soon as a lease ends.
                        tokio::select! {
                            _ = tokio::time::sleep(BUSY_HEARTBEAT) => {}
                            Some((id, outcome)) = done_rx.recv() => {
                                running.remove(&id);
                                leases.complete(&id, outcome);
                            }
                            _ = term.recv() => leases.drain(),
                            _ = int.recv() => leases.drain(),
                        }
                    }
                }
                Err(e) => {
                    // A session the scheduler does not know any more (restarted, or
                    // expired): a new one. Anything else: try again after a while.
                    use tonic::Code;
                    if matches!(e.code(), Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition | Code::Unavailable | Code::Unknown | Code::Internal) {
                        tracing::debug!("UpdateBotSession: {e}");
                    }
                    if matches!(e.code(), Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition) {
                        session = None;
                    } else {
                        unanswered(&mut lost, &e);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    if backoff == MAX_BACKOFF {
                        session = None;
                    }
                }
            },
            Some((id, outcome)) = done_rx.recv() => {
                // The poll in flight goes; the result is reported at once.
                running.remove(&id);
                leases.complete(&id, outcome);
            }
            _ = term.recv() => {
                say("worker: taking no new lease; stopping once the running ones are done");
                leases.drain();
            }
            _ = int.recv() => {
                say("worker: taking no new lease; stopping once the running ones are done");
                leases.drain();
            }
        }
    }
}

/// Runs `work` on a thread of its own; its outcome goes to `done`.
fn start(
    shared: Arc<Shared>,
    work: Work,
    done: tokio::sync::mpsc::UnboundedSender<(String, Outcome)>,
    stats: Option<Arc<Stats>>,
) {
    let (id, fallback) = (work.id.clone(), done.clone());
    let spawned = std::thread::Builder::new()
        .name("wasm9p-lease".into())
        .spawn(move || {
            let (outcome, took) = action::run(&shared, &work);
            if outcome.status.code != 0 {
                say(&format!(
                    "worker: lease {}: code {}: {}",
                    work.id, outcome.status.code, outcome.status.message
                ));
            }
            if let Some(stats) = &stats {
                stats.action(&took);
            }
            let _ = done.send((work.id, outcome));
        });
    if let Err(e) = spawned {
        let outcome = Outcome::error(
            wasm9p_remote::lease::code::UNAVAILABLE,
            format!("the worker could not start a thread: {e}"),
        );
        let _ = fallback.send((id, outcome));
    }
}

/// `--stats FILE`: a JSON line per action, the totals at the end.
struct Stats {
    file: Mutex<std::fs::File>,
    totals: Mutex<Totals>,
}

#[derive(Default)]
struct Totals {
    actions: u64,
    failed: u64,
    blobs_fetched: u64,
    bytes_fetched: u64,
    store_hits: u64,
    rpcs_9p: u64,
    run_ms: u64,
}

impl Stats {
    fn open(path: &PathBuf) -> Result<Stats, String> {
        let file =
            std::fs::File::create(path).map_err(|e| format!("--stats {}: {e}", path.display()))?;
        Ok(Stats {
            file: Mutex::new(file),
            totals: Mutex::default(),
        })
    }

    fn line(&self, json: serde_json::Value) {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(file, "{json}");
        let _ = file.flush();
    }

    fn action(&self, took: &ActionStats) {
        {
            let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
            t.actions += 1;
            t.failed += u64::from(took.status != 0);
            t.blobs_fetched += took.blobs_fetched;
            t.bytes_fetched += took.bytes_fetched;
            t.store_hits += took.store_hits;
            t.rpcs_9p += took.rpcs_9p;
            t.run_ms += took.run_ms;
        }
        self.line(serde_json::json!({ "action": took.json() }));
    }

    fn totals(&self) {
        let t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        self.line(serde_json::json!({ "totals": {
            "actions": t.actions,
            "failed": t.failed,
            "blobs_fetched": t.blobs_fetched,
            "bytes_fetched": t.bytes_fetched,
            "store_hits": t.store_hits,
            "rpc_9p": t.rpcs_9p,
            "run_ms": t.run_ms,
        }}));
    }
}

/// Says, once, that the scheduler stopped answering (`lost` remembers it).
fn unanswered(lost: &mut bool, e: &tonic::Status) {
    if !std::mem::replace(lost, true) {
        say(&format!(
            "worker: the scheduler does not answer ({}); retrying",
            e.message()
        ));
    }
}

/// Says, once, that the scheduler answers again after `unanswered`.
fn answered(lost: &mut bool) {
    if std::mem::take(lost) {
        say("worker: the scheduler answers again");
    }
}
