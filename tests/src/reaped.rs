//! Child processes a test cannot leak: [`Reaped`] kills and waits for its process when
//! dropped, so a test that panics (an assertion, a missing fixture) takes its servers
//! with it, and nothing is left holding the pipe a test runner reads (`scripts/test`'s
//! `tee` waits for every writer to close it).

use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Stdio};

/// Runs the shell `script` once this process has ended, however it ends (a shared
/// server a test binary keeps for all its tests is never dropped): a watchdog shell
/// in a session of its own polls for this process every second, then runs it.
pub fn when_this_process_ends(script: &str) {
    let watchdog = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 1; done; {script}",
        me = std::process::id()
    );
    // It outlives this process by design: never waited for.
    #[allow(clippy::zombie_processes)]
    Command::new("setsid")
        .args(["sh", "-c", &watchdog])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("setsid sh");
}

/// A child process killed (SIGKILL) and waited for when dropped, unless it has been
/// waited for already. Derefs to the [`Child`].
#[derive(Debug)]
pub struct Reaped(Child);

impl Reaped {
    /// Spawns `command`; panics, naming the program, if it cannot start.
    pub fn spawn(command: &mut Command) -> Reaped {
        let program = command.get_program().to_string_lossy().into_owned();
        Reaped(
            command
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {program}: {e}")),
        )
    }

    /// Takes a child already started.
    pub fn of(child: Child) -> Reaped {
        Reaped(child)
    }
}

impl Deref for Reaped {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
