//! How a guest ended, by type.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::limits::MemoryLimitReached;

/// How one guest ended.
#[derive(Debug)]
pub enum Outcome {
    /// It returned from `_start` or `wasi:cli/run` (0, or 1 for a component's `err`)
    /// or called `exit` with this code.
    Exited(i32),
    /// It asked for more memory than its limit ([`super::Guest::memory_limit`]).
    MemoryLimit(MemoryLimitReached),
    /// It was stopped from outside: its cancel flag ([`super::Guest::cancel`]) was
    /// set (a timeout, or whoever started it went away).
    Interrupted,
    /// It trapped, or could not be instantiated: the error, with the guest's wasm
    /// backtrace when there is one.
    Trapped(wasmtime::Error),
}

impl Outcome {
    /// The outcome of a run that returned `result`, for a guest whose cancel flag is
    /// `cancel`: the memory limit first (it is why the guest stopped, whatever else
    /// happened), then a cancel, then the trap itself.
    pub(crate) fn of(result: wasmtime::Result<i32>, cancel: Option<&AtomicBool>) -> Outcome {
        match result {
            Ok(code) => Outcome::Exited(code),
            Err(e) => match MemoryLimitReached::in_error(&e) {
                Some(reached) => Outcome::MemoryLimit(reached),
                None if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) => Outcome::Interrupted,
                None => Outcome::Trapped(e),
            },
        }
    }

    /// The exit code a process would give for it: the guest's own code (clamped to
    /// 0..=255), and 1 for anything but an exit.
    pub fn exit_code(&self) -> u8 {
        match self {
            Outcome::Exited(code) => (*code).clamp(0, 255) as u8,
            _ => 1,
        }
    }

    /// Whether it exited 0.
    pub fn succeeded(&self) -> bool {
        matches!(self, Outcome::Exited(0))
    }

    /// One line saying why it ended, for anything but an exit. A trap's outermost
    /// message is often only "error while executing at wasm backtrace:"; the cause
    /// (the trap's kind, a host error) is what tells.
    pub fn reason(&self) -> Option<String> {
        match self {
            Outcome::Exited(_) => None,
            Outcome::MemoryLimit(reached) => Some(reached.to_string()),
            Outcome::Interrupted => Some("interrupted: its cancel flag was set".into()),
            Outcome::Trapped(e) => {
                let cause = e.root_cause().to_string();
                Some(cause.lines().next().unwrap_or_default().to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_keep_their_code_and_everything_else_is_one_with_a_reason() {
        assert_eq!(Outcome::of(Ok(3), None).exit_code(), 3);
        assert_eq!(Outcome::of(Ok(300), None).exit_code(), 255);
        assert!(Outcome::of(Ok(0), None).succeeded());
        assert_eq!(Outcome::of(Ok(0), None).reason(), None);

        let trap = Outcome::of(Err(wasmtime::Error::msg("boom\nmore")), None);
        assert!(matches!(trap, Outcome::Trapped(_)));
        assert_eq!((trap.exit_code(), trap.reason()), (1, Some("boom".into())));

        // A cancel is known by its flag, not by the words of the trap.
        let set = AtomicBool::new(true);
        let stopped = Outcome::of(Err(wasmtime::Error::msg("anything")), Some(&set));
        assert!(matches!(stopped, Outcome::Interrupted));
        // An exit after the flag was set is still the guest's exit.
        assert!(matches!(Outcome::of(Ok(0), Some(&set)), Outcome::Exited(0)));
    }

    #[test]
    fn the_memory_limit_is_known_by_type_and_before_a_cancel() {
        let reached = MemoryLimitReached {
            limit: 1 << 20,
            asked: Some(2 << 20),
        };
        let e = wasmtime::Error::new(reached).context("error while executing");
        let set = AtomicBool::new(true);
        match Outcome::of(Err(e), Some(&set)) {
            Outcome::MemoryLimit(got) => assert_eq!(got, reached),
            other => panic!("{other:?}"),
        }
        // Words alone are a trap like any other.
        let words = wasmtime::Error::msg("forcing trap when growing memory to 2097152 bytes");
        assert!(matches!(Outcome::of(Err(words), None), Outcome::Trapped(_)));
    }
}
