//! The daemon a tool finds, or starts, for itself (as ccache's and sccache's servers
//! are): every `wasm9p cc` of a build shares one warm engine, module and set of caches
//! without anyone starting a daemon by hand.
//!
//! - **Which daemon.** One per user and per root: its socket is named after a hash of
//!   the project root, the toolchain, the root's source, the module cache and the
//!   `wasm9p` executable itself (path, size and mtime: a rebuilt `wasm9p` starts a
//!   daemon of its own, the old one goes when idle). A daemon serves one root (it
//!   refuses the others), so a build in another root starts another daemon. Sockets
//!   live in `$XDG_RUNTIME_DIR/wasm9p` (else `$XDG_CACHE_HOME/wasm9p/daemons`, else
//!   `~/.cache/wasm9p/daemons`), a directory of mode 0700 that must be the user's own;
//!   the daemon checks each client's uid as well.
//! - **Starting it.** A tool that finds nobody answering takes the lock file beside the
//!   socket, looks again (another tool may have started it meanwhile), removes a
//!   socket a dead daemon left, and starts `wasm9p daemon` detached: its own process
//!   group (a Ctrl-C of the build does not reach it), stdin and stdout closed and
//!   stderr to `NAME.log` beside the socket (so it never holds a build's pipes open).
//!   It waits until the daemon answers, then lets the lock go: two first calls at once
//!   start one daemon.
//! - **Its end.** The daemon exits after `--idle-timeout` (10 minutes) without a client.
//! - **When none can be had** (no place for its socket, it does not start or answer in
//!   time), the tool compiles in its own process after one line on stderr.

use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a tool waits for a daemon it started to answer.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest socket path Linux takes (`sun_path`, with its terminating zero).
const MAX_SOCKET_PATH: usize = 107;

/// What a tool sends its work to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Daemon {
    /// Its own process (`WASM9P_DAEMON=off`).
    Off,
    /// The daemon on this socket (`--daemon unix:PATH`, `WASM9P_DAEMON=unix:PATH`).
    At(PathBuf),
    /// The user's daemon for the root, started if need be (the default).
    Auto,
}

impl Daemon {
    /// `off`, `auto` or `unix:PATH`.
    pub(super) fn parse(s: &str) -> Result<Daemon, String> {
        match s {
            "off" => Ok(Daemon::Off),
            "auto" => Ok(Daemon::Auto),
            _ => super::daemon::parse_unix(s)
                .map(Daemon::At)
                .map_err(|e| format!("{e}, or off, or auto")),
        }
    }
}

/// What makes one daemon another: the daemon serves exactly these.
#[derive(Hash)]
pub(super) struct Identity<'a> {
    pub(super) root: &'a Path,
    pub(super) toolchain: &'a Path,
    pub(super) root_source: Option<&'a str>,
}

/// A daemon reached: the connection, its socket, and whether this call started it.
pub(super) struct Reached {
    pub(super) stream: UnixStream,
    pub(super) socket: PathBuf,
    pub(super) started: bool,
}

/// The user's daemon for `identity`, started if nobody answers on its socket.
pub(super) fn reach(identity: &Identity) -> Result<Reached, String> {
    let dir = socket_dir()?;
    let name = format!("d-{:016x}", key(identity));
    let socket = dir.join(format!("{name}.sock"));
    if socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(format!("the socket path {} is too long", socket.display()));
    }
    if let Ok(stream) = UnixStream::connect(&socket) {
        return Ok(Reached {
            stream,
            socket,
            started: false,
        });
    }
    let lock = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{name}.lock")))
        .map_err(|e| format!("cannot open the daemon's lock: {e}"))?;
    lock.lock()
        .map_err(|e| format!("cannot take the daemon's lock: {e}"))?;
    // Another tool may have started it while this one waited for the lock.
    if let Ok(stream) = UnixStream::connect(&socket) {
        return Ok(Reached {
            stream,
            socket,
            started: false,
        });
    }
    // Nobody answers: a socket file left is a dead daemon's.
    match std::fs::remove_file(&socket) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(format!("cannot remove the stale {}: {e}", socket.display()))
        }
        _ => {}
    }
    let log = dir.join(format!("{name}.log"));
    let stream = start(identity, &socket, &log)?;
    drop(lock);
    Ok(Reached {
        stream,
        socket,
        started: true,
    })
}

/// Starts `wasm9p daemon` on `socket` for `identity` and waits for it to answer.
fn start(identity: &Identity, socket: &Path, log: &Path) -> Result<UnixStream, String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find wasm9p: {e}"))?;
    let log_file = std::fs::File::create(log)
        .map_err(|e| format!("cannot write the daemon's log {}: {e}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .arg(format!("--listen=unix:{}", socket.display()))
        .arg("--root")
        .arg(identity.root)
        .arg("--toolchain")
        .arg(identity.toolchain);
    if let Some(source) = identity.root_source {
        cmd.arg("--root-source").arg(source);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the daemon: {e}"))?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(stream) = UnixStream::connect(socket) {
            // Reaped when it ends, if this process lives that long; else init's.
            let _ = std::thread::Builder::new()
                .name("wasm9p-daemon-reaper".into())
                .spawn(move || child.wait());
            return Ok(stream);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the daemon exited ({status}): {}",
                last_line(log).unwrap_or_else(|| "it said nothing".into())
            ));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "the daemon did not answer within {} s (its log: {})",
                START_TIMEOUT.as_secs(),
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last line of the file at `path`, if any.
fn last_line(path: &Path) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .read_to_string(&mut text)
        .ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(str::to_owned)
}

/// A hash of what the daemon serves and of the executable that would serve it.
fn key(identity: &Identity) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    identity.hash(&mut h);
    std::env::var_os("WASM9P_CACHE_DIR").hash(&mut h);
    if let Ok(exe) = std::env::current_exe() {
        exe.hash(&mut h);
        if let Ok(meta) = std::fs::metadata(&exe) {
            (meta.size(), meta.mtime(), meta.mtime_nsec(), meta.ino()).hash(&mut h);
        }
    }
    h.finish()
}

/// The directory the user's daemon sockets live in: made 0700 if missing, refused
/// if it is another user's or others may write in it.
fn socket_dir() -> Result<PathBuf, String> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let dir = match (var("XDG_RUNTIME_DIR"), var("XDG_CACHE_HOME"), var("HOME")) {
        (Some(run), _, _) if Path::new(&run).is_dir() => Path::new(&run).join("wasm9p"),
        (_, Some(cache), _) => Path::new(&cache).join("wasm9p/daemons"),
        (_, _, Some(home)) => Path::new(&home).join(".cache/wasm9p/daemons"),
        _ => return Err("no directory for its socket (set XDG_RUNTIME_DIR or HOME)".into()),
    };
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let meta = std::fs::metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!("{} belongs to another user", dir.display()));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_setting_is_off_auto_or_a_unix_socket() {
        assert_eq!(Daemon::parse("off"), Ok(Daemon::Off));
        assert_eq!(Daemon::parse("auto"), Ok(Daemon::Auto));
        assert_eq!(
            Daemon::parse("unix:/run/d.sock"),
            Ok(Daemon::At("/run/d.sock".into()))
        );
        let bad = Daemon::parse("tcp:1.2.3.4:5").unwrap_err();
        assert!(bad.contains("unix:PATH") && bad.contains("off"), "{bad}");
    }

    #[test]
    fn daemons_are_told_apart_by_root_toolchain_and_source() {
        let id = |root: &'static str, source| Identity {
            root: Path::new(root),
            toolchain: Path::new("/t"),
            root_source: source,
        };
        assert_eq!(key(&id("/a", None)), key(&id("/a", None)));
        assert_ne!(key(&id("/a", None)), key(&id("/b", None)));
        assert_ne!(key(&id("/a", None)), key(&id("/a", Some("bind"))));
    }
}
