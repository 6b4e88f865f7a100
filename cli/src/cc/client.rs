//! A tool's invocation sent to a `wasm9p daemon` (the user's own for the root, see
//! [`super::autostart`], or the one `--daemon unix:PATH` / `WASM9P_DAEMON` names),
//! its output relayed as it comes, its exit code returned.
//!
//! Stdin is sent only when an argument is `-` (the one way the tools read it); the
//! guests of any other invocation see an empty stdin.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::wire::{self, Request};
use super::{roots, Options};

/// Why an invocation sent to a daemon did not end with an exit code.
pub(super) enum Failure {
    /// The daemon closed before it answered anything, and nothing of this process's
    /// (its stdin) was used up: the invocation can still run elsewhere.
    Unanswered(String),
    /// Anything else.
    Failed(String),
}

impl From<String> for Failure {
    fn from(why: String) -> Failure {
        Failure::Failed(why)
    }
}

/// Sends the invocation to the daemon on `stream` (listening on `daemon`): the exit
/// code it had, or why it could not be run.
pub(super) fn run(
    mut stream: UnixStream,
    daemon: &Path,
    name: &str,
    opts: &Options,
    args: Vec<String>,
) -> Result<u8, Failure> {
    let (cwd, root) = roots(opts)?;
    let text = |p: &Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{} is not UTF-8", p.display()))
    };
    let request = Request {
        tool: name.to_owned(),
        stdin: args.iter().any(|a| a == "-"),
        args,
        cwd: text(&cwd)?,
        root: text(&root)?,
        env: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    };
    let lost = |e: std::io::Error| format!("lost the daemon at unix:{}: {e}", daemon.display());
    // Nothing answered yet, and stdin not read: the work may go elsewhere.
    let retriable = |why: String, answered: bool| match answered || request.stdin {
        true => Failure::Failed(why),
        false => Failure::Unanswered(why),
    };
    let mut answered = false;
    // A daemon that refuses the request says why and closes before reading it all: a
    // failed send is reported only if no answer can be read either.
    let sent = send_request(&mut stream, &request);
    loop {
        let frame = match (wire::receive(&mut stream), &sent) {
            (Ok(frame), _) => frame,
            (Err(_), Err(e)) => {
                let e = std::io::Error::new(e.kind(), e.to_string());
                return Err(retriable(lost(e), answered));
            }
            (Err(e), Ok(())) => return Err(retriable(lost(e), answered)),
        };
        answered |= frame.is_some();
        match frame {
            Some((wire::STDOUT, bytes)) => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&bytes).and_then(|()| out.flush());
            }
            Some((wire::STDERR, bytes)) => {
                let _ = std::io::stderr().lock().write_all(&bytes);
            }
            Some((wire::EXIT, code)) if code.len() == 1 => return Ok(code[0]),
            Some((tag, _)) => {
                return Err(Failure::Failed(format!(
                    "the daemon sent an unknown frame {tag:#x}"
                )))
            }
            None => {
                let why = match sent {
                    Err(e) => lost(e),
                    Ok(()) => format!(
                        "the daemon at unix:{} went away before the end",
                        daemon.display()
                    ),
                };
                return Err(retriable(why, answered));
            }
        }
    }
}

/// The request, then stdin when it reads it.
fn send_request(stream: &mut UnixStream, request: &Request) -> std::io::Result<()> {
    wire::send(stream, wire::REQUEST, &request.to_json())?;
    if request.stdin {
        let mut stdin = std::io::stdin().lock();
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            let n = stdin.read(&mut chunk)?;
            wire::send(stream, wire::STDIN, &chunk[..n])?;
            if n == 0 {
                break;
            }
        }
    }
    Ok(())
}
