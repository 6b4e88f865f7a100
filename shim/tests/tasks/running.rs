//! A task started through `ctr` and kept running (`Running`), and plain HTTP/1.1 to it.

use super::*;

/// A free port on 127.0.0.1.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 GET on a connection of its own: the status and the body.
pub(crate) fn get(port: u16, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no head in {} bytes", response.len())))?;
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad head {head:?}")))?;
    let mut body = response[head_end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = unchunk(&body);
    }
    Ok((status, body))
}

pub(crate) fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[line_end + 2..line_end + 2 + size]);
        body = &body[line_end + 2 + size + 2..];
    }
}

/// A task running under `ctr run --rm` (not detached: ctr ends with the task's exit
/// code), listening on `port` when it serves.
pub(crate) struct Running {
    pub(crate) ns: &'static str,
    pub(crate) id: String,
    pub(crate) port: u16,
    pub(crate) ctr: Option<std::process::Child>,
    /// Where ctr's stdout and stderr go (the task's, and ctr's own words).
    pub(crate) output: tempfile::NamedTempFile,
}

impl Running {
    /// Starts `args` on the directory `root`.
    pub(crate) fn spawn(
        ns: &'static str,
        id: &str,
        root: &Path,
        options: &[&str],
        args: &[&str],
        port: u16,
    ) -> Running {
        let mut all = vec!["--rootfs"];
        all.extend_from_slice(options);
        Running::spawn_image(ns, id, &root.display().to_string(), &all, args, port)
    }

    /// Starts `args` on `image` (or what `options` make of it: `--rootfs`).
    pub(crate) fn spawn_image(
        ns: &'static str,
        id: &str,
        image: &str,
        options: &[&str],
        args: &[&str],
        port: u16,
    ) -> Running {
        let mut ctr = containerd().ctr_run(ns);
        ctr.args(options)
            .arg(image)
            .arg(id)
            .args(args)
            .stdin(std::process::Stdio::null());
        let output = tempfile::NamedTempFile::new().unwrap();
        ctr.stdout(output.reopen().unwrap())
            .stderr(output.reopen().unwrap());
        Running {
            ns,
            id: id.to_owned(),
            port,
            ctr: Some(ctr.spawn().unwrap()),
            output,
        }
    }

    /// What ctr and the task printed so far.
    pub(crate) fn printed(&self) -> String {
        std::fs::read_to_string(self.output.path()).unwrap_or_default()
    }

    /// Serves `wasm` on a free port of 127.0.0.1, the address given as runwasi's
    /// wasmtime shim takes it; returns once it listens.
    pub(crate) fn start(
        ns: &'static str,
        id: &str,
        root: &Path,
        wasm: &str,
        extra: &[&str],
    ) -> Running {
        let port = free_port();
        let listen = format!("WASMTIME_HTTP_PROXY_SOCKET_ADDR=127.0.0.1:{port}");
        let mut options = vec!["--net-host", "--env", &listen];
        options.extend_from_slice(extra);
        let mut served = Running::spawn(ns, id, root, &options, &[wasm], port);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = served.ctr.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{id} ended ({status}): {}; {:?}",
                    served.printed(),
                    containerd().log_of(id)
                );
            }
            assert!(
                Instant::now() < deadline,
                "{id} did not listen on {port}: {:?}",
                containerd().log_of(id)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        served
    }

    /// `ctr task ls` in the task's namespace.
    fn task_list(&self) -> String {
        let tasks = containerd()
            .ctr(self.ns)
            .args(["task", "ls"])
            .output()
            .unwrap();
        text(&tasks).0
    }

    /// Waits until containerd says the task runs.
    pub(crate) fn wait_running(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let list = self.task_list();
            if list
                .lines()
                .any(|l| l.starts_with(&format!("{} ", self.id)) && l.contains("RUNNING"))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} is not running: {list}; ctr: {}",
                self.id,
                self.printed()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The task's process id (in the machine's pid namespace), as `ctr task ls` says.
    pub(crate) fn pid(&self) -> u32 {
        self.wait_running();
        let list = self.task_list();
        list.lines()
            .find(|l| l.starts_with(&format!("{} ", self.id)))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no pid for {} in {list}", self.id))
    }

    /// `ctr task kill -s SIGNAL`, then the task's exit code (ctr's).
    pub(crate) fn stop(&mut self, signal: &str) -> i32 {
        let kill = containerd()
            .ctr(self.ns)
            .args(["task", "kill", "-s", signal, &self.id])
            .output()
            .unwrap();
        assert!(kill.status.success(), "{:?}", text(&kill));
        let mut child = self.ctr.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                if self.printed().contains(STATE_RACE) {
                    return containerd().remove_after_state_race(self.ns, &self.id);
                }
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not end after {signal}",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.ctr.take() {
            let _ = containerd()
                .ctr(self.ns)
                .args(["task", "kill", "-s", "SIGKILL", &self.id])
                .output();
            let _ = child.wait();
            if self.printed().contains(STATE_RACE) {
                containerd().remove_after_state_race(self.ns, &self.id);
            }
        }
    }
}
