//! Child processes a test cannot leak: [`Reaped`] kills and waits for its process when
//! dropped, so a test that panics (an assertion, a missing fixture) takes its servers
//! with it, and nothing is left holding the pipe a test runner reads (`scripts/test`'s
//! `tee` waits for every writer to close it).

use std::ops::{Deref, DerefMut};
use std::process::{Child, Command};

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
