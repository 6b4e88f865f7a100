//! Debian's diod server as a child process on loopback (TCP or a Unix socket).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether diod is installed (`scripts/test` installs it; tests that need it fail
/// loudly without it rather than pass vacuously).
pub fn diod_available() -> bool {
    Path::new("/usr/sbin/diod").exists()
}

/// A running `diod -f -n -N -l LISTEN -e DIR`; killed when dropped.
pub struct Diod {
    child: Child,
    /// The TCP port it listens on (0 when it listens on a Unix socket).
    pub port: u16,
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Diod {
    /// Starts diod exporting `dir` on a free loopback port and waits until it accepts
    /// connections.
    ///
    /// A port free a moment ago may be taken by another test's server before diod binds
    /// it; diod then exits while the other server answers in its place (and goes away
    /// with the other test). So the port is diod's only once diod itself is seen
    /// listening on it; if diod exits first, another port is tried.
    pub fn start(dir: &Path) -> Diod {
        let deadline = Instant::now() + crate::TEST_TIMEOUT;
        loop {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            if let Some(mut diod) = Diod::spawn_until(dir, &listen, |pid| listens(pid, port)) {
                diod.port = port;
                return diod;
            }
            assert!(
                Instant::now() < deadline,
                "diod found no free port to listen on"
            );
        }
    }

    /// Starts diod exporting `dir` on `listen` (`IP:PORT` or a Unix socket path of
    /// this test's own).
    pub fn start_on(dir: &Path, listen: &str) -> Diod {
        let port = listen
            .parse::<std::net::SocketAddr>()
            .ok()
            .map(|a| a.port());
        let up = |pid| match port {
            Some(port) => listens(pid, port),
            None => std::os::unix::net::UnixStream::connect(listen).is_ok(),
        };
        Diod::spawn_until(dir, listen, up)
            .unwrap_or_else(|| panic!("diod exited: it could not listen on {listen}"))
    }

    /// Spawns diod on `listen` and waits until `ready(its pid)`; `None` if it exits
    /// first (its address was taken).
    fn spawn_until(dir: &Path, listen: &str, ready: impl Fn(u32) -> bool) -> Option<Diod> {
        assert!(
            diod_available(),
            "diod is not installed: apt-get install diod"
        );
        let child = Command::new("/usr/sbin/diod")
            .args(["-f", "-n", "-N", "-l", listen, "-e"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start diod");
        let mut diod = Diod { child, port: 0 };
        let deadline = Instant::now() + crate::TEST_TIMEOUT;
        while !ready(diod.child.id()) {
            if diod.child.try_wait().ok().flatten().is_some() {
                return None;
            }
            assert!(
                Instant::now() < deadline,
                "diod did not start listening on {listen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(diod)
    }

    /// Kills the server process now (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `HOST:PORT` for diod's tools.
    pub fn host_port(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Diod {
    /// Kills diod; when a test failed with diod already gone, says how it went (a
    /// signal, SIGPIPE say, is what a client closing with replies unread can cause).
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Ok(Some(status)) = self.child.try_wait() {
                eprintln!("diod had exited before the test ended: {status}");
            }
        }
        self.kill();
    }
}

/// Whether process `pid` holds a socket listening on 127.0.0.1:`port` (or any address
/// on that port), from `/proc/net/tcp` and the process's descriptors.
fn listens(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let listening: Vec<&str> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit_once(':')?.1;
            let state = *fields.get(3)?;
            let inode = *fields.get(9)?;
            (u16::from_str_radix(local_port, 16).ok()? == port && state == "0A").then_some(inode)
        })
        .collect();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .any(|target| {
            let target = target.to_string_lossy();
            target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
                .is_some_and(|inode| listening.contains(&inode))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_another_server_holds_is_not_taken_for_diods() {
        if !diod_available() {
            panic!("diod is not installed: apt-get install diod");
        }
        let dir = tempfile::tempdir().unwrap();
        // Someone else listens on the port: diod cannot bind it and exits, and
        // connections to the port reach the other listener, not diod.
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken = other.local_addr().unwrap().to_string();
        let started = std::panic::catch_unwind(|| Diod::start_on(dir.path(), &taken));
        assert!(started.is_err(), "diod was taken to listen on {taken}");
        // A free port: diod itself is found listening there.
        let diod = Diod::start(dir.path());
        assert!(listens(diod.child.id(), diod.port));
        assert!(!listens(
            diod.child.id(),
            other.local_addr().unwrap().port()
        ));
    }
}
