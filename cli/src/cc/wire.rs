//! What `wasm9p cc --daemon` and `wasm9p daemon` say to each other over the daemon's
//! Unix socket: frames of a tag byte, a big-endian `u32` length and that many bytes.
//!
//! - The client sends one `Q` frame (the [`Request`] as JSON), then, when the request
//!   says so, its stdin as `I` frames ending with an empty one; then it only reads.
//!   Closing its end at any time cancels what it asked for.
//! - The daemon sends `O` and `E` frames (the guests' stdout and stderr, and its own
//!   messages, as they come) and one `X` frame holding the exit code, then closes.

use std::io::{self, Read, Write};

use serde_json::{json, Value};

/// Largest frame either side accepts (a request's arguments and environment, a chunk
/// of stdin or output).
pub(super) const MAX_FRAME: usize = 16 << 20;

/// The request frame.
pub(super) const REQUEST: u8 = b'Q';
/// A chunk of the client's stdin (empty: its end).
pub(super) const STDIN: u8 = b'I';
/// A chunk of stdout.
pub(super) const STDOUT: u8 = b'O';
/// A chunk of stderr.
pub(super) const STDERR: u8 = b'E';
/// The exit code (one byte).
pub(super) const EXIT: u8 = b'X';

/// Writes one frame.
pub(super) fn send(to: &mut impl Write, tag: u8, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&n| n as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut frame = Vec::with_capacity(5 + payload.len());
    frame.push(tag);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    to.write_all(&frame)
}

/// Reads one frame: `None` at a clean end of the stream (before any byte of a frame).
pub(super) fn receive(from: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match from.read(&mut head[..1])? {
        0 => return Ok(None),
        _ => from.read_exact(&mut head[1..])?,
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes is over the limit"),
        ));
    }
    let mut payload = vec![0u8; len];
    from.read_exact(&mut payload)?;
    Ok(Some((head[0], payload)))
}

/// What a client asks the daemon to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Request {
    /// The tool's name as called (`cc`, `wasm32-wasi-ar`, ...).
    pub(super) tool: String,
    pub(super) args: Vec<String>,
    /// The client's working directory (absolute, resolved).
    pub(super) cwd: String,
    /// The project root the client means (absolute, resolved).
    pub(super) root: String,
    /// The environment the guests get.
    pub(super) env: Vec<(String, String)>,
    /// Whether stdin frames follow.
    pub(super) stdin: bool,
}

impl Request {
    pub(super) fn to_json(&self) -> Vec<u8> {
        json!({
            "tool": self.tool,
            "args": self.args,
            "cwd": self.cwd,
            "root": self.root,
            "env": self.env,
            "stdin": self.stdin,
        })
        .to_string()
        .into_bytes()
    }

    pub(super) fn from_json(bytes: &[u8]) -> Result<Request, String> {
        let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("bad request: {e}"))?;
        let text = |k: &str| {
            v[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("bad request: no {k}"))
        };
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array()?
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect()
        };
        let env = v["env"]
            .as_array()
            .and_then(|pairs| {
                pairs
                    .iter()
                    .map(|p| match strings(p)?.as_slice() {
                        [k, v] => Some((k.clone(), v.clone())),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or("bad request: env")?;
        Ok(Request {
            tool: text("tool")?,
            args: strings(&v["args"]).ok_or("bad request: args")?,
            cwd: text("cwd")?,
            root: text("root")?,
            env,
            stdin: v["stdin"].as_bool().unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_back_as_they_were_sent() {
        let mut wire = Vec::new();
        send(&mut wire, STDOUT, b"hello").unwrap();
        send(&mut wire, EXIT, &[3]).unwrap();
        let mut from = wire.as_slice();
        assert_eq!(
            receive(&mut from).unwrap(),
            Some((STDOUT, b"hello".to_vec()))
        );
        assert_eq!(receive(&mut from).unwrap(), Some((EXIT, vec![3])));
        assert_eq!(receive(&mut from).unwrap(), None);
    }

    #[test]
    fn a_cut_or_oversized_frame_is_an_error_not_a_hang_or_an_allocation() {
        let mut cut: &[u8] = &[STDOUT, 0, 0, 0, 9, b'x'];
        assert!(receive(&mut cut).is_err());
        let mut huge: &[u8] = &[STDOUT, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            receive(&mut huge).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn a_request_survives_the_trip() {
        let request = Request {
            tool: "cc".into(),
            args: vec!["-c".into(), "a b.c".into()],
            cwd: "/p/build".into(),
            root: "/p".into(),
            env: vec![("PWD".into(), "/p/build".into())],
            stdin: true,
        };
        assert_eq!(Request::from_json(&request.to_json()).unwrap(), request);
        assert!(Request::from_json(b"{\"tool\": 1}").is_err());
    }
}
