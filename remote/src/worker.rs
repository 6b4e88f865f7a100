//! The bot's loop: a session with the scheduler updated in a long poll, leases started
//! and stopped as its answers ask ([`crate::lease`]), each on a thread of its own
//! ([`Actions::run`]), their results reported.
//!
//! - When a lease ends, the poll in flight is dropped and its result reported at once
//!   (the scheduler gives any lease it had assigned meanwhile again in its next
//!   answer).
//! - While every slot is busy the bot reports its leases every [`BUSY_HEARTBEAT`] (the
//!   scheduler answers at once then), which is how a taken-back lease is noticed: its
//!   guest's cancel flag is set within about a second.
//! - **The scheduler goes away** (restarted, unreachable): the bot retries, with a
//!   back-off up to [`MAX_BACKOFF`], and makes a new session when the old one is not
//!   known any more (or after the longest back-off).
//! - **Draining** (the worker was told to stop): no new lease is taken (the bot says
//!   BOT_TERMINATING, and a lease offered anyway is handed back UNAVAILABLE, which the
//!   scheduler retries elsewhere); the loop ends once the running ones are reported,
//!   or at once when the scheduler is gone and nothing runs.
//!
//! What it says goes to the worker's [`Reports`]: the lines a person reads, and each
//! action's figures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::action::{ActionStats, Actions, Guests, Work};
use crate::apis::workers::{BotStatus, Lease};
use crate::bots::{Bot, Session};
use crate::lease::{code, Event, Leases, Outcome};

/// How long one update may wait for the scheduler's answer.
pub const POLL: Duration = Duration::from_secs(20);
/// How often a bot with no room reports its leases.
pub const BUSY_HEARTBEAT: Duration = Duration::from_secs(1);
/// The longest wait between tries to reach the scheduler.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// The first wait after a failed try.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Where a worker's news goes.
pub trait Reports: Send + Sync + 'static {
    /// A line for whoever watches the worker (sessions, leases taken back or
    /// failed, the scheduler lost and found).
    fn say(&self, line: &str);
    /// What one action took, once it is over.
    fn action(&self, _took: &ActionStats) {}
}

/// Runs the bot `bot` on `channel` (the scheduler's Bots service) until it is told
/// to stop (a message on `stop`, or `stop` closed) and its leases are reported.
pub async fn serve<G: Guests>(
    actions: Arc<Actions<G>>,
    bot: Bot,
    channel: tonic::transport::Channel,
    reports: Arc<dyn Reports>,
    stop: mpsc::UnboundedReceiver<()>,
) -> Result<(), String> {
    let (done_tx, done) = mpsc::unbounded_channel::<(String, Outcome)>();
    let mut woken = Wakes {
        done,
        stop,
        stop_open: true,
    };
    let mut leases = Leases::new(bot.capacity);
    let mut running: HashMap<String, Arc<AtomicBool>> = HashMap::new();
    let mut session: Option<Session> = None;
    let mut backoff = FIRST_BACKOFF;
    // Whether the scheduler has stopped answering (see `Lost`).
    let mut lost = Lost::default();
    // The scheduler's last answer, not yet taken in (none when an update was dropped
    // for a lease that ended: no answer is not an empty one).
    let mut offered: Option<Vec<Lease>> = None;
    let take = |woke: Woke, leases: &mut Leases, running: &mut HashMap<_, _>| match woke {
        Woke::Slept => {}
        Woke::Ended(id, outcome) => {
            running.remove(&id);
            leases.complete(&id, outcome);
        }
        Woke::Stop if !leases.draining() => {
            reports.say("worker: taking no new lease; stopping once the running ones are done");
            leases.drain();
        }
        Woke::Stop => {}
    };
    loop {
        // What the last answer asked for.
        let events = offered.take().map(|answer| leases.sync(&answer));
        for event in events.into_iter().flatten() {
            match event {
                Event::Start { id, payload } => {
                    let cancel = Arc::new(AtomicBool::new(false));
                    running.insert(id.clone(), cancel.clone());
                    let work = Work {
                        id,
                        payload,
                        cancel,
                    };
                    start(actions.clone(), work, done_tx.clone(), reports.clone());
                }
                Event::Stop { id } => {
                    if let Some(cancel) = running.remove(&id) {
                        cancel.store(true, Ordering::Relaxed);
                        reports.say(&format!(
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
                    lost.answered(&*reports);
                    reports.say(&format!("worker: session {}", made.name()));
                    session = Some(made);
                    offered = Some(first);
                    backoff = FIRST_BACKOFF;
                }
                Err(e) => {
                    tracing::debug!("CreateBotSession: {e}");
                    lost.unanswered(&*reports, &e);
                    if leases.draining() && running.is_empty() {
                        return Ok(()); // nothing to report to a scheduler that is gone
                    }
                    let woke = woken.next(Some(backoff)).await;
                    take(woke, &mut leases, &mut running);
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
                    lost.answered(&*reports);
                    tracing::debug!(
                        "answer: {:?}",
                        answer.iter().map(|l| (&l.id, l.state)).collect::<Vec<_>>()
                    );
                    offered = Some(answer);
                    backoff = FIRST_BACKOFF;
                    if busy {
                        // The scheduler answers at once then: report again soon, or
                        // as soon as a lease ends.
                        let woke = woken.next(Some(BUSY_HEARTBEAT)).await;
                        take(woke, &mut leases, &mut running);
                    }
                }
                Err(e) => {
                    // A session the scheduler does not know any more (restarted, or
                    // expired): a new one. Anything else: try again after a while.
                    use tonic::Code;
                    tracing::debug!("UpdateBotSession: {e}");
                    if matches!(e.code(), Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition) {
                        session = None;
                    } else {
                        lost.unanswered(&*reports, &e);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    if backoff == MAX_BACKOFF {
                        session = None;
                    }
                }
            },
            // A lease ended (the poll in flight goes; the result is reported at once),
            // or the worker is told to stop.
            woke = woken.next(None) => take(woke, &mut leases, &mut running),
        }
    }
}

/// What the loop waits for besides the scheduler's answer.
struct Wakes {
    /// The leases that ended, with their outcomes.
    done: mpsc::UnboundedReceiver<(String, Outcome)>,
    /// A message (or its closing) tells the worker to stop.
    stop: mpsc::UnboundedReceiver<()>,
    /// Whether `stop` can still say anything.
    stop_open: bool,
}

/// Why [`Wakes::next`] returned.
enum Woke {
    /// Its wait passed.
    Slept,
    /// A lease ended.
    Ended(String, Outcome),
    /// The worker is told to stop.
    Stop,
}

impl Wakes {
    /// The next lease to end or word to stop, waiting at most `wait` (`None`: for as
    /// long as it takes).
    async fn next(&mut self, wait: Option<Duration>) -> Woke {
        let sleep = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => Woke::Slept,
            Some((id, outcome)) = self.done.recv() => Woke::Ended(id, outcome),
            said = self.stop.recv(), if self.stop_open => {
                self.stop_open = said.is_some();
                Woke::Stop
            }
        }
    }
}

/// Runs `work` on a thread of its own; its outcome goes to `done`.
fn start<G: Guests>(
    actions: Arc<Actions<G>>,
    work: Work,
    done: mpsc::UnboundedSender<(String, Outcome)>,
    reports: Arc<dyn Reports>,
) {
    let (id, fallback) = (work.id.clone(), done.clone());
    let spawned = std::thread::Builder::new()
        .name("wasm9p-lease".into())
        .spawn(move || {
            let (outcome, took) = actions.run(&work);
            if outcome.status.code != code::OK {
                reports.say(&format!(
                    "worker: lease {}: code {}: {}",
                    work.id, outcome.status.code, outcome.status.message
                ));
            }
            reports.action(&took);
            let _ = done.send((work.id, outcome));
        });
    if let Err(e) = spawned {
        let outcome = Outcome::error(
            code::UNAVAILABLE,
            format!("the worker could not start a thread: {e}"),
        );
        let _ = fallback.send((id, outcome));
    }
}

/// Whether the scheduler has stopped answering: said once when it stops, once when it
/// answers again.
#[derive(Default)]
struct Lost(bool);

impl Lost {
    fn unanswered(&mut self, reports: &dyn Reports, e: &tonic::Status) {
        if !std::mem::replace(&mut self.0, true) {
            reports.say(&format!(
                "worker: the scheduler does not answer ({}); retrying",
                e.message()
            ));
        }
    }

    fn answered(&mut self, reports: &dyn Reports) {
        if std::mem::take(&mut self.0) {
            reports.say("worker: the scheduler answers again");
        }
    }
}
