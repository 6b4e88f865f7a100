//! What every command module shares, below them all: one-line messages on stderr, the
//! exit code of a usage error, and the `K=V` parser of `--env` and `--property`.

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
