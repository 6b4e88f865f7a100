//! A `wasm9p serve` process, as users start it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::Reaped;

/// Starts `bin serve ARGS...` and waits for its "serving" line on stderr (later lines
/// are drained so the server never blocks on a full pipe). Returns the child, killed
/// when dropped (a test that panics leaves no server behind), and the line.
pub fn spawn_serve<I, S>(bin: &str, args: I) -> (Reaped, String)
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut child = Reaped::spawn(
        Command::new(bin)
            .arg("serve")
            .args(args)
            .stderr(Stdio::piped()),
    );
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("serving"), "unexpected first line: {line:?}");
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    (child, line)
}

/// The address in a "serving EXPORTS on ADDR" line.
pub fn served_addr(line: &str) -> String {
    line.trim()
        .rsplit_once(" on ")
        .map(|(_, addr)| addr.to_string())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}
