//! `wasm9p mount` for tests: a mount process started, waited for, stopped, and never
//! left behind.
#![allow(dead_code)] // each test binary uses its own part of this

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// A running `wasm9p mount`.
pub struct Mounted {
    pub child: Option<Child>,
    point: tempfile::TempDir,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Mounted {
    /// Starts `wasm9p mount ARGS... POINT` and waits for it to say it is mounted.
    pub fn start(args: &[String]) -> Mounted {
        let point = tempfile::tempdir().unwrap();
        let mut child = Command::new(BIN)
            .arg("mount")
            .args(args)
            .arg(point.path())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("wasm9p mount said nothing");
        assert!(line.contains("mounted on"), "{line}");
        Mounted {
            child: Some(child),
            point,
            stderr: rx,
        }
    }

    pub fn path(&self) -> &Path {
        self.point.path()
    }

    /// SIGTERM, then the exit status and what it printed on stderr after mounting.
    pub fn stop(&mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().expect("running");
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let status = wait_bounded(&mut child, Duration::from_secs(20));
        let rest: Vec<String> = self.stderr.try_iter().collect();
        (status, rest.join("\n"))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever happened, leave no mount behind.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.point.path())
            .stderr(Stdio::null())
            .status();
    }
}

pub fn wait_bounded(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("wasm9p mount did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A mount of `dir` at the root: embedded 9p in cache `mode`, or `bind` (the host
/// directory itself behind the same FUSE layer, the baseline).
pub fn embedded(dir: &Path, mode: &str) -> Vec<String> {
    let spec = match mode {
        "bind" => format!("type=bind,source={},target=/", dir.display()),
        _ => format!("type=9p,export={},target=/,cache={mode}", dir.display()),
    };
    vec!["--mount".into(), spec]
}
