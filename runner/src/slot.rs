//! A slot process (`wasm9p worker-slot`): the process a worker runs its guests in, one
//! at a time, answering the [`crate::protocol`] requests on its stdin.
//!
//! The worker starts a slot when it has an action and no idle slot, with pipes for
//! stdin and stdout (its stderr is the worker's), and kills it (SIGKILL) to stop its
//! guest: a timeout, a lease taken back. So the guest's code needs no epoch checks,
//! and a guest that brings down its process takes no other action with it.
//!
//! At the end of its stdin the slot ends: at once when it has a guest running (the
//! worker is gone), else after handing its unfinished optimized compiles on.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use wasm9p_host::p1::Sink;

use crate::programs::{NoProgram, Programs, SlotConfig, SlotRun};
use crate::protocol::{self, Reply, Request, RunRequest};

/// Why a slot process stopped before its stdin ended.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// Its stdout could not be kept for replies.
    #[error("worker-slot: its stdout: {0}")]
    Stdout(String),
    /// A line on its stdin is not a request: the worker is not one of this build.
    #[error("worker-slot: a bad request: {0}")]
    BadRequest(String),
}

/// Runs this process as a slot until its stdin ends: requests read from stdin, replies
/// written to stdout (whatever else would be printed there goes to stderr).
pub fn serve_slot(config: SlotConfig) -> Result<(), SlotError> {
    let tools = Programs::new(config);
    // Set from a request read to its reply written: the worker going away then
    // ends the slot at once, its guest with it.
    let busy = Arc::new(AtomicBool::new(false));
    let (requests, next) = mpsc::channel::<String>();
    let reading = busy.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            reading.store(true, Ordering::SeqCst);
            if requests.send(line).is_err() {
                return;
            }
        }
        if reading.load(Ordering::SeqCst) {
            std::process::exit(1);
        }
        // Dropping `requests` ends the loop below.
    });
    // Replies go to the worker's pipe, and whatever else would be printed on stdout
    // to stderr, where it cannot pass for a reply.
    let pipe = rustix::io::fcntl_dupfd_cloexec(std::io::stdout(), 3)
        .and_then(|pipe| rustix::stdio::dup2_stdout(std::io::stderr()).map(|()| pipe));
    let mut replies = match pipe {
        Ok(pipe) => std::fs::File::from(pipe),
        Err(e) => return Err(SlotError::Stdout(e.to_string())),
    };
    for line in next {
        let reply = match protocol::parse::<Request>(&line) {
            Err(e) => return Err(SlotError::BadRequest(e)),
            Ok(Request::Load(module)) => match tools.get(&module) {
                Ok(_) => Reply::Loaded,
                Err(NoProgram::NotFetched) => Reply::NotFetched,
                Err(NoProgram::NotLoaded(why)) => Reply::NotAProgram(why),
            },
            Ok(Request::Run(run)) => run_guest(&tools, run),
        };
        let written = replies.write_all(protocol::line_of(&reply).as_bytes());
        busy.store(false, Ordering::SeqCst);
        if written.is_err() {
            break; // the worker is gone
        }
    }
    tools.finish();
    Ok(())
}

/// Runs the guest `run` asks for.
fn run_guest(tools: &Programs, run: RunRequest) -> Reply {
    let engine = match tools.get(&run.module) {
        Ok(engine) => engine,
        Err(why) => return Reply::Failed(why.to_string()),
    };
    let stream = |path: &PathBuf| {
        file_sink(path, run.output_limit).map_err(|e| format!("{}: {e}", path.display()))
    };
    let (stdout, stderr) = match (stream(&run.stdout), stream(&run.stderr)) {
        (Ok(out), Ok(err)) => (out, err),
        (Err(e), _) | (_, Err(e)) => return Reply::Failed(e),
    };
    let ran = tools.run(
        &engine,
        SlotRun {
            argv: run.argv,
            env: run.env,
            working_dir: run.working_dir,
            socket: run.socket,
            tmp: run.tmp,
            stdout,
            stderr,
            memory_limit: run.memory_limit,
        },
    );
    match ran {
        Ok(ran) => Reply::Ran(ran),
        Err(why) => Reply::Failed(why),
    }
}

/// A guest stream written into the file `path` (the worker made it), at most `limit`
/// bytes; the rest is dropped without a word (the guest's writes still succeed).
fn file_sink(path: &PathBuf, limit: u64) -> std::io::Result<Sink> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let kept = Mutex::new((file, 0u64));
    Ok(Sink(Arc::new(move |data: &[u8]| {
        let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
        let room = limit.saturating_sub(kept.1) as usize;
        let data = &data[..data.len().min(room)];
        kept.0.write_all(data)?;
        kept.1 += data.len() as u64;
        Ok(())
    })))
}
