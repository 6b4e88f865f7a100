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
    pub fn start(dir: &Path) -> Diod {
        let port = free_port();
        let mut diod = Diod::start_on(dir, &format!("127.0.0.1:{port}"));
        diod.port = port;
        diod
    }

    /// Starts diod exporting `dir` on `listen` (`IP:PORT` or a Unix socket path).
    pub fn start_on(dir: &Path, listen: &str) -> Diod {
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
        let deadline = Instant::now() + crate::TEST_TIMEOUT;
        let up = || {
            if listen.starts_with('/') {
                std::os::unix::net::UnixStream::connect(listen).is_ok()
            } else {
                std::net::TcpStream::connect(listen).is_ok()
            }
        };
        while !up() {
            assert!(
                Instant::now() < deadline,
                "diod did not start listening on {listen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Diod { child, port: 0 }
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
    fn drop(&mut self) {
        self.kill();
    }
}
