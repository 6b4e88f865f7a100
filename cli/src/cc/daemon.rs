//! `wasm9p daemon --listen unix:PATH`: one warm host for every `wasm9p cc --daemon` of
//! a build.
//!
//! The daemon loads clang.wasm once and makes its mounts once; each client's request
//! (argv, working directory, environment, and stdin when it reads it; see [`wire`])
//! becomes a [`Invocation`] on a thread of its own, so the compiles of a `make -j` share
//! one engine, one module and one set of caches. What the guests print goes back to
//! the client as it comes; the exit code last.
//!
//! - **Who may connect:** the socket is made with mode 0600, and each client's peer
//!   credentials are checked: a uid other than the daemon's is refused.
//! - **Which build:** the daemon serves one project root; a client whose root differs
//!   is refused, as is a working directory or a path outside the root.
//! - **A client that goes away** (killed, or its connection closed) cancels its
//!   guests: the next WASI call they make traps (see
//!   [`wasm9p_host::p1::WasiP1CtxBuilder::cancel`]); with `--prompt-cancel`, within 10 ms
//!   even mid-computation (epoch interruption, [`wasm9p_host::interrupt`]), for guest code
//!   about 12-15 % slower.
//! - **Files changed behind its back:** the root is mounted `cache=loose,revalidate=0`:
//!   every lookup and open checks the server, so an edit made by anything but the
//!   daemon (an editor, a code generator run by make) is seen by the next compile. The
//!   toolchain never changes and stays cached for good.
//! - **SIGTERM or SIGINT:** no new client is taken, the running ones finish, then the
//!   daemon removes its socket and exits 0. So it does after `--idle-timeout` (10
//!   minutes by default) without a client.
//! - **Its socket comes first:** it listens before it loads clang.wasm, so clients
//!   that come while it loads (or compiles it, on a machine that never ran it) wait in
//!   the socket's queue rather than find nobody; a tool that started it (see
//!   [`super::autostart`]) knows at once that it is there.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;

use super::wire::{self, Request};
use super::{guest_env, paths, Options, Setup, Tool, EXIT_SETUP};
use crate::shared::{fail, parse_duration, say};
use wasm9p_host::engine::GuestEngine;
use wasm9p_host::p1::{Input, Sink};
use wasm9p_host::toolchain::{Invocation, Io};

/// `wasm9p daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Where to listen: unix:PATH (made with mode 0600).
    #[arg(long, value_name = "unix:PATH", value_parser = parse_unix)]
    pub listen: PathBuf,
    /// The project root the clients build in (default: $WASM9P_ROOT, else the
    /// working directory).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Serve the root from this `wasm9p serve` address instead of the embedded
    /// server (`bind`: the plain host directory).
    #[arg(long, value_name = "ADDR")]
    pub root_source: Option<String>,
    /// The clang.wasm toolchain (default: $WASM9P_TOOLCHAIN, else what
    /// scripts/fetch-clang-wasm fetched).
    #[arg(long, value_name = "DIR")]
    pub toolchain: Option<PathBuf>,
    /// Stop a gone client's guests within 10 ms, even mid-computation (epoch
    /// interruption: the guests' code runs about 12-15 % slower). Without it they stop
    /// at their next WASI call.
    #[arg(long)]
    pub prompt_cancel: bool,
    /// Stop after this long without a client: seconds, or a number with s, m or h
    /// (0: never). Default: $WASM9P_DAEMON_IDLE_TIMEOUT, else 10m.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,
}

/// How long a daemon lives without a client, unless told.
const DEFAULT_IDLE_TIMEOUT_TEXT: &str = "10m";

/// What a tool that starts a daemon says of its end: the idle timeout the daemon
/// will take from the same environment ([`idle_timeout`]), as `N s`.
pub(super) fn idle_words() -> String {
    match idle_timeout(None) {
        Ok(idle) if idle.is_zero() => "it runs until it is stopped".into(),
        Ok(idle) => format!("it stops after {} s without a client", idle.as_secs()),
        Err(e) => format!("it will not start: {e}"),
    }
}

/// The idle timeout: `given`, else `$WASM9P_DAEMON_IDLE_TIMEOUT` (how a daemon that
/// a tool starts is told), else the default.
fn idle_timeout(given: Option<Duration>) -> Result<Duration, String> {
    if let Some(given) = given {
        return Ok(given);
    }
    let text = std::env::var("WASM9P_DAEMON_IDLE_TIMEOUT")
        .ok()
        .filter(|v| !v.is_empty());
    match text {
        Some(text) => parse_duration(&text).map_err(|e| format!("WASM9P_DAEMON_IDLE_TIMEOUT: {e}")),
        None => parse_duration(DEFAULT_IDLE_TIMEOUT_TEXT),
    }
}

/// `unix:PATH`, the only address a daemon takes.
pub(super) fn parse_unix(s: &str) -> Result<PathBuf, String> {
    match s.strip_prefix("unix:") {
        Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
        _ => Err(format!(
            "{s:?}: the daemon is reached through a Unix socket only (unix:PATH)"
        )),
    }
}

/// Runs `wasm9p daemon` until SIGTERM or SIGINT.
pub fn daemon(args: DaemonArgs) -> ExitCode {
    let mut opts = Options {
        root: args.root,
        root_source: args.root_source,
        toolchain: args.toolchain,
        daemon: None,
    };
    opts.fill_from_env();
    let setup = match Setup::new(opts, false) {
        Ok(setup) => setup,
        Err(e) => return fail(EXIT_SETUP, &format!("daemon: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(1, &format!("daemon: cannot start the runtime: {e}")),
    };
    let idle = match idle_timeout(args.idle_timeout) {
        Ok(idle) => (!idle.is_zero()).then_some(idle),
        Err(e) => return fail(EXIT_SETUP, &format!("daemon: {e}")),
    };
    let listener = match runtime.block_on(listen(&args.listen)) {
        Ok(listener) => listener,
        Err(e) => return fail(EXIT_SETUP, &format!("daemon: {e}")),
    };
    let host = match setup.host(args.prompt_cancel) {
        Ok(host) => host,
        Err(code) => {
            drop(listener);
            let _ = std::fs::remove_file(&args.listen);
            return code;
        }
    };
    let daemon = Daemon {
        host: &host,
        setup: &setup,
        uid: rustix::process::geteuid().as_raw(),
        clients: AtomicUsize::new(0),
        last_client: Mutex::new(Instant::now()),
    };
    say(&format!(
        "daemon: serving {} on unix:{} (pid {})",
        setup.root.display(),
        args.listen.display(),
        std::process::id()
    ));
    let served = std::thread::scope(|scope| {
        runtime.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let (mut term, mut int) = (
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            );
            loop {
                tokio::select! {
                    _ = term.recv() => break,
                    _ = int.recv() => break,
                    _ = tokio::time::sleep(Duration::from_secs(1)), if idle.is_some() => {
                        if let Some(idle) = idle.filter(|idle| daemon.idle_for(*idle)) {
                            say(&format!(
                                "daemon: no client for {} s; stopping",
                                idle.as_secs()
                            ));
                            break;
                        }
                    }
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else {
                            // Out of descriptors, say: give the running clients a moment
                            // rather than spin on the error.
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        };
                        let daemon = &daemon;
                        daemon.clients.fetch_add(1, Ordering::SeqCst);
                        scope.spawn(move || {
                            daemon.serve(stream);
                            *daemon.last_client.lock().unwrap_or_else(|e| e.into_inner()) =
                                Instant::now();
                            daemon.clients.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                }
            }
            drop(listener);
            let _ = std::fs::remove_file(&args.listen);
            say("daemon: stopping once the running clients are done");
            std::io::Result::Ok(())
        })
    });
    host.finish();
    match served {
        Ok(()) => {
            say("daemon: stopped");
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &format!("daemon: {e}")),
    }
}

/// Binds `path` with mode 0600, taking over a socket file no daemon answers on.
async fn listen(path: &Path) -> Result<tokio::net::UnixListener, String> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(format!("a daemon already listens on {}", path.display()));
        }
        std::fs::remove_file(path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    }
    // Made private from the start: no moment in which another user could connect.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let bound = tokio::net::UnixListener::bind(path);
    rustix::process::umask(old);
    bound.map_err(|e| format!("cannot listen on {}: {e}", path.display()))
}

/// What every client's thread shares.
struct Daemon<'a> {
    host: &'a GuestEngine,
    setup: &'a Setup,
    uid: u32,
    /// Clients being served.
    clients: AtomicUsize,
    /// When the last client was done (or the daemon started).
    last_client: Mutex<Instant>,
}

impl Daemon<'_> {
    /// Whether no client has been served for `idle`.
    fn idle_for(&self, idle: Duration) -> bool {
        self.clients.load(Ordering::SeqCst) == 0
            && self
                .last_client
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed()
                >= idle
    }

    /// One client, start to end.
    fn serve(&self, stream: tokio::net::UnixStream) {
        let uid = stream.peer_cred().map(|c| c.uid());
        let Ok(mut stream) = stream.into_std() else {
            return;
        };
        if stream.set_nonblocking(false).is_err() {
            return;
        }
        let refuse = |stream: &mut UnixStream, why: &str| {
            let _ = wire::send(
                stream,
                wire::STDERR,
                format!("wasm9p daemon: {why}\n").as_bytes(),
            );
            let _ = wire::send(stream, wire::EXIT, &[EXIT_SETUP]);
        };
        match uid {
            Ok(uid) if uid == self.uid => {}
            Ok(uid) => {
                return refuse(
                    &mut stream,
                    &format!("refused: uid {uid} is not the user this daemon runs as"),
                )
            }
            Err(e) => return refuse(&mut stream, &format!("refused: no peer credentials: {e}")),
        }
        // A client that connects and says nothing must not hold a thread for good.
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(30)));
        let (request, stdin) = match read_request(&mut stream) {
            Ok(got) => got,
            Err(why) => return refuse(&mut stream, &why),
        };
        let _ = stream.set_read_timeout(None);
        let (tool, cwd) = match self.check(&request) {
            Ok(checked) => checked,
            Err(why) => return refuse(&mut stream, &why),
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let code = std::thread::scope(|scope| {
            // The client sends nothing more: reading sees its end when it goes away.
            if let Ok(mut watch) = stream.try_clone() {
                let cancel = Arc::clone(&cancel);
                scope.spawn(move || {
                    while let Ok(Some(_)) = wire::receive(&mut watch) {}
                    cancel.store(true, Ordering::Relaxed);
                });
            }
            let writer = match stream.try_clone() {
                Ok(writer) => Arc::new(Mutex::new(writer)),
                Err(_) => return None,
            };
            let sink = |tag: u8| {
                let writer = Arc::clone(&writer);
                let cancel = Arc::clone(&cancel);
                Sink(Arc::new(move |bytes: &[u8]| {
                    let mut writer = writer.lock().unwrap_or_else(|e| e.into_inner());
                    let sent = bytes
                        .chunks(wire::MAX_FRAME)
                        .try_for_each(|chunk| wire::send(&mut *writer, tag, chunk));
                    if sent.is_err() {
                        cancel.store(true, Ordering::Relaxed);
                    }
                    sent
                }))
            };
            let session = Invocation {
                host: self.host,
                env: guest_env(request.env.iter().cloned(), &cwd),
                cwd: &cwd,
                usr: Some(&self.setup.toolchain.usr),
                tmp: self.setup.tmp.path(),
                namespace: None,
                memory_limit: None,
                io: Io::Client {
                    stdin: Input::given(stdin),
                    stdout: sink(wire::STDOUT),
                    stderr: sink(wire::STDERR),
                    cancel: Arc::clone(&cancel),
                },
            };
            let code = session.run(tool, &request.args).exit_code();
            if cancel.load(Ordering::Relaxed) {
                say(&format!(
                    "daemon: a client went away during `{}`; its guests were stopped",
                    request.tool
                ));
            }
            let mut writer = writer.lock().unwrap_or_else(|e| e.into_inner());
            let _ = wire::send(&mut *writer, wire::EXIT, &[code]);
            // Ends the watcher's read too.
            let _ = stream.shutdown(std::net::Shutdown::Both);
            Some(code)
        });
        if code.is_none() {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
    }

    /// The tool and working directory of an acceptable request, or why not.
    fn check(&self, request: &Request) -> Result<(Tool, PathBuf), String> {
        let tool = Tool::named(&request.tool)
            .ok_or_else(|| format!("{:?} is not a tool this daemon runs", request.tool))?;
        if Path::new(&request.root) != self.setup.root {
            return Err(format!(
                "this daemon serves the project root {}, not {} (start one for that root, \
                 or build under this one)",
                self.setup.root.display(),
                request.root
            ));
        }
        let cwd = PathBuf::from(&request.cwd);
        if !cwd.is_absolute() || !cwd.starts_with(&self.setup.root) {
            return Err(format!(
                "the working directory {} is outside the project root {}",
                request.cwd,
                self.setup.root.display()
            ));
        }
        if let Some(path) = paths::outside_root(&request.args, &cwd, &self.setup.root) {
            return Err(format!(
                "{path} is outside the project root {} that the guest sees",
                self.setup.root.display()
            ));
        }
        Ok((tool, cwd))
    }
}

/// The request frame and, when it says so, the stdin frames after it.
fn read_request(stream: &mut UnixStream) -> Result<(Request, Vec<u8>), String> {
    let request = match wire::receive(stream) {
        Ok(Some((wire::REQUEST, payload))) => Request::from_json(&payload)?,
        Ok(_) => return Err("expected a request".into()),
        Err(e) => return Err(format!("reading the request: {e}")),
    };
    let mut stdin = Vec::new();
    if !request.stdin {
        return Ok((request, stdin));
    }
    loop {
        match wire::receive(stream) {
            Ok(Some((wire::STDIN, chunk))) if chunk.is_empty() => break,
            Ok(Some((wire::STDIN, chunk))) if stdin.len() + chunk.len() <= wire::MAX_FRAME => {
                stdin.extend_from_slice(&chunk)
            }
            Ok(Some((wire::STDIN, _))) => {
                return Err(format!(
                    "stdin over {} MiB is not taken",
                    wire::MAX_FRAME >> 20
                ))
            }
            Ok(_) => return Err("expected stdin".into()),
            Err(e) => return Err(format!("reading stdin: {e}")),
        }
    }
    Ok((request, stdin))
}
