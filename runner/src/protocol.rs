//! What a worker and its slot processes say to each other: one JSON [`Request`] a line
//! on the slot's stdin, one JSON [`Reply`] a line on its stdout, each a serde type of
//! this module (the wire is theirs alone: both ends are the same build).
//!
//! - `{"load": {"module": PATH, "sha256": HEX}}`: load the module (a content-store
//!   file, whose bytes have that digest, and which may not have been fetched yet);
//!   `"loaded"`, `"not_fetched"` (its compiled code is not kept, and its file is not
//!   there) or `{"not_a_program": WHY}`.
//! - `{"run": {"module", "sha256", "argv", "env", "working_dir", "socket", "tmp",
//!   "stdout", "stderr", "output_limit", "memory_limit"}}`: run a guest on the input
//!   root the worker serves on `socket`, its streams into the files `stdout` and
//!   `stderr` (at most `output_limit` bytes each); `{"ran": {"ended": ..., "rpc_9p",
//!   "read_9p", "shared_page_hits", "shared_metadata_hits"}}` (a
//!   [`wasm9p_remote::action::Ran`]) or `{"failed": WHY}` (it could not start).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use wasm9p_remote::action::Ran;

/// What the worker asks of a slot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Load a module (once per slot).
    Load(ModuleFile),
    /// Run a guest on a loaded (or loadable) module.
    Run(RunRequest),
}

/// A module: the content-store file of its bytes (fetched or not), and their SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModuleFile {
    /// The content-store file.
    #[serde(rename = "module")]
    pub path: PathBuf,
    /// The SHA-256 of its bytes (hex on the wire).
    #[serde(with = "hex_sha256")]
    pub sha256: [u8; 32],
}

/// A guest to run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// Its program.
    #[serde(flatten)]
    pub module: ModuleFile,
    /// Its arguments, `argv[0]` as the action's `Command` gives it.
    pub argv: Vec<String>,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// Its working directory, absolute in its namespace.
    pub working_dir: String,
    /// The Unix socket the worker serves the action's input root on, to be `/`.
    pub socket: PathBuf,
    /// The action's directory of its own, to be `/tmp`.
    pub tmp: PathBuf,
    /// The file its stdout goes into (the worker made it).
    pub stdout: PathBuf,
    /// The file its stderr goes into.
    pub stderr: PathBuf,
    /// The most bytes kept of each stream.
    pub output_limit: u64,
    /// The most bytes its memory may take.
    pub memory_limit: usize,
}

/// What a slot answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The module loaded.
    Loaded,
    /// Its compiled code is not kept and its file is not fetched yet.
    NotFetched,
    /// It does not load: why, in one line.
    NotAProgram(String),
    /// The guest ran to its end.
    Ran(Ran),
    /// The guest could not start: why, in one line.
    Failed(String),
}

/// A message as its line (newline included).
pub fn line_of<T: Serialize>(message: &T) -> String {
    // Strings, numbers and paths made of strings: nothing here fails to serialize
    // but a path that is not UTF-8, which the worker never makes.
    let mut line = serde_json::to_string(message).unwrap_or_else(|e| {
        serde_json::to_string(&Reply::Failed(format!("a message not sent: {e}")))
            .unwrap_or_default()
    });
    line.push('\n');
    line
}

/// The message a line holds; an error in one line.
pub fn parse<'a, T: Deserialize<'a>>(line: &'a str) -> Result<T, String> {
    serde_json::from_str(line).map_err(|e| e.to_string())
}

/// A SHA-256 as 64 hex digits.
mod hex_sha256 {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(sha256: &[u8; 32], to: S) -> Result<S::Ok, S::Error> {
        to.serialize_str(&hex::encode(sha256))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<[u8; 32], D::Error> {
        let text = <&str>::deserialize(from)?;
        let mut sha256 = [0u8; 32];
        hex::decode_to_slice(text, &mut sha256)
            .map_err(|e| D::Error::custom(format!("sha256: {e}")))?;
        Ok(sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm9p_remote::action::{Ended, GuestCounts};

    #[test]
    fn requests_and_replies_read_back_as_written() {
        let module = ModuleFile {
            path: "/cas/ab/cd".into(),
            sha256: [0xa7; 32],
        };
        let run = Request::Run(RunRequest {
            module: module.clone(),
            argv: vec!["bin/tool.wasm".into(), "a \"quoted\"\nline".into()],
            env: vec![("K".into(), "v=1".into())],
            working_dir: "/src".into(),
            socket: "/run/w/0.sock".into(),
            tmp: "/w/actions/a/tmp".into(),
            stdout: "/run/w/0.out".into(),
            stderr: "/run/w/0.err".into(),
            output_limit: 1 << 30,
            memory_limit: 4 << 30,
        });
        let load = Request::Load(module);
        for request in [run, load] {
            let line = line_of(&request);
            assert_eq!(line.matches('\n').count(), 1, "one line: {line}");
            assert_eq!(parse::<Request>(&line).unwrap(), request);
        }
        let ran = |ended| {
            Reply::Ran(Ran {
                ended,
                counts: GuestCounts {
                    rpcs_9p: 358,
                    reads_9p: 2,
                    shared_page_hits: 74,
                    shared_metadata_hits: 203,
                },
            })
        };
        for reply in [
            Reply::Loaded,
            Reply::NotFetched,
            Reply::NotAProgram("its module does not load: bad magic".into()),
            Reply::Failed("the action's mounts: refused".into()),
            ran(Ended::Exited(-3)),
            ran(Ended::Stopped),
            ran(Ended::MemoryLimit("asked 5 GiB".into())),
            ran(Ended::Trapped("wasm trap: unreachable".into())),
        ] {
            assert_eq!(parse::<Reply>(&line_of(&reply)).unwrap(), reply);
        }
    }

    #[test]
    fn the_wire_is_as_documented_and_a_bad_line_is_an_error() {
        let load = Request::Load(ModuleFile {
            path: "/cas/ab".into(),
            sha256: [1; 32],
        });
        let line = line_of(&load);
        assert_eq!(
            line,
            format!(
                "{{\"load\":{{\"module\":\"/cas/ab\",\"sha256\":\"{}\"}}}}\n",
                "01".repeat(32)
            )
        );
        assert_eq!(line_of(&Reply::NotFetched), "\"not_fetched\"\n");
        let ran = Reply::Ran(Ran {
            ended: Ended::Exited(0),
            counts: GuestCounts::default(),
        });
        let json: serde_json::Value = parse(&line_of(&ran)).unwrap();
        assert_eq!(json["ran"]["ended"]["exited"], 0);
        assert_eq!(json["ran"]["rpc_9p"], 0);
        assert!(parse::<Request>("{\"run\": {\"module\": 3}}").is_err());
        let short = r#"{"load": {"module": "/cas/ab/cd", "sha256": "a7a7"}}"#;
        assert!(parse::<Request>(short).unwrap_err().contains("sha256"));
        assert!(parse::<Reply>("{}").is_err());
        assert!(parse::<Reply>("not json").is_err());
    }
}
