//! SIGTERM and SIGINT for a task (`ctr task kill`, a pod's deletion).
//!
//! The task's process is the first of its pid namespace, and the kernel drops a
//! signal sent to such a process unless it has a handler. So the handler is
//! installed at the container's create ([`watch()`], from the sandbox's `can_handle`),
//! not when the guest is about to run: a signal sent as soon as containerd says the
//! task runs, while the program is still being compiled, is not lost. What a signal
//! does is the task's: a cli task ends at once ([`end_process_on_stop`]); an http task
//! stops accepting and drains ([`stopped`]).

use std::sync::OnceLock;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// The last stop signal received, if any.
static STOP: OnceLock<watch::Sender<Option<i32>>> = OnceLock::new();

/// Starts catching SIGTERM and SIGINT (once: later calls do nothing). Call it inside
/// a tokio runtime that lives as long as the process (runwasi's): the handlers are
/// that runtime's.
pub fn watch() -> std::io::Result<()> {
    if STOP.get().is_some() {
        return Ok(());
    }
    let sender = watch::channel(None).0;
    for (kind, number) in [(SignalKind::terminate(), 15), (SignalKind::interrupt(), 2)] {
        let mut stream = signal(kind)?;
        let sender = sender.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                log::info!("wasm9p: signal {number}");
                sender.send_replace(Some(number));
            }
        });
    }
    let _ = STOP.set(sender);
    Ok(())
}

/// Resolves once a stop signal has come (at once if one came already); never
/// without [`watch()`].
pub async fn stopped() -> i32 {
    let Some(sender) = STOP.get() else {
        return std::future::pending().await;
    };
    let mut receiver = sender.subscribe();
    let signal = receiver
        .wait_for(Option::is_some)
        .await
        .map(|signal| signal.unwrap_or_default());
    match signal {
        Ok(signal) => signal,
        Err(_) => std::future::pending().await,
    }
}

/// Ends the process once a stop signal comes, with 128 + the signal as a killed
/// process would (a cli task: its guest stops wherever it is). Call it inside the
/// runtime [`watch()`] was.
pub fn end_process_on_stop() {
    tokio::spawn(async {
        let signal = stopped().await;
        log::info!("wasm9p: ending the task on signal {signal}");
        std::process::exit(128 + signal);
    });
}
