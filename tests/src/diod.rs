//! Debian's diod server as a child process on a free loopback port.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether diod is installed (`.ci/run` installs it; tests that need it fail loudly
/// without it rather than pass vacuously).
pub fn diod_available() -> bool {
    Path::new("/usr/sbin/diod").exists()
}

/// A running `diod -f -n -N -l 127.0.0.1:PORT -e DIR`; killed when dropped.
pub struct Diod {
    child: Child,
    /// The port it listens on.
    pub port: u16,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Diod {
    /// Starts diod exporting `dir` and waits until it accepts connections.
    pub fn start(dir: &Path) -> Diod {
        assert!(
            diod_available(),
            "diod is not installed: apt-get install diod"
        );
        let port = free_port();
        let child = Command::new("/usr/sbin/diod")
            .args(["-f", "-n", "-N", "-l", &format!("127.0.0.1:{port}"), "-e"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start diod");
        let deadline = Instant::now() + crate::TEST_TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "diod did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        Diod { child, port }
    }

    /// `HOST:PORT` for diod's tools.
    pub fn host_port(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Diod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
