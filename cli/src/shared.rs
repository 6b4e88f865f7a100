//! What every command module shares, below them all: one-line messages on stderr, the
//! exit code of a usage error, and the parsers of `K=V` (`--env`, `--property`), of
//! byte counts and of durations.

use std::process::ExitCode;

/// Exit code for bad usage or configuration.
pub const EXIT_USAGE: u8 = 2;

/// Prints one line and returns the exit code.
pub fn fail(code: u8, message: &str) -> ExitCode {
    say(message);
    ExitCode::from(code)
}

/// One line on stderr, prefixed `wasm9p: `. Unlike `eprintln!`, a closed stderr is
/// ignored rather than a panic: a server must not die because its log reader went away.
pub fn say(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "wasm9p: {message}");
}

/// A `K=V` pair (the key not empty).
pub(crate) fn parse_env(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!("{s:?} is not K=V")),
    }
}

/// A number of bytes, with `K`, `M` or `G` (binary).
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    wasm9p_guest_fs::mount_options::parse_bytes(s)
        .ok_or_else(|| format!("{s:?}: expected a number of bytes (with K, M or G)"))
}

/// `N` (seconds), `Nms`, `Ns`, `Nm` or `Nh`.
pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    wasm9p_guest_fs::mount_options::parse_duration(s).ok_or_else(|| {
        format!(
            "{s:?}: expected seconds, or a number with ms, s, m or h (not past u64 milliseconds)"
        )
    })
}

/// SIGINT and SIGTERM, registered at once (so a signal that comes right after the
/// "serving" line is caught, not fatal); `wait` resolves on the first of them.
pub(crate) struct Shutdown {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Shutdown {
    pub(crate) fn register() -> std::io::Result<Shutdown> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Shutdown {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    pub(crate) async fn wait(mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_take_their_unit_and_refuse_what_is_not_one() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "ms", "1x", "-1s", "1.5s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_bytes("64M"), Ok(64 << 20));
        assert!(parse_bytes("lots").is_err());
    }
}
