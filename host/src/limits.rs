//! The memory a guest may take, enforced by a [`wasmtime::ResourceLimiter`] of ours so
//! that reaching it is known by type, never by reading what the guest printed.
//!
//! A store given a [`MemoryLimiter`] with a limit refuses a `memory.grow` (or an
//! instantiation) that would take one memory past it, and the refusal is a trap
//! carrying [`MemoryLimitReached`]: the guest stops there, rather than seeing -1 and
//! taking the host's memory in smaller steps. A growth within the limit that the host
//! could not back traps the same way. Whoever ran the guest asks
//! [`MemoryLimitReached::in_error`] of the error its run returned; the guest's own
//! output plays no part, so a guest that prints wasmtime's words is not taken for one
//! that reached the limit, and one that did is known as such whatever it printed.
//! Without a limit the limiter allows what wasmtime's defaults allow.

use std::fmt;

/// The trap of a guest that asked for more memory than its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLimitReached {
    /// The limit, in bytes, of each of the guest's memories.
    pub limit: usize,
    /// The size asked for; `None`: a size within the limit that the host could not
    /// give.
    pub asked: Option<usize>,
}

impl MemoryLimitReached {
    /// The limit `error` (a guest's run or instantiation) reports reaching, if it is
    /// one of ours.
    pub fn in_error(error: &wasmtime::Error) -> Option<MemoryLimitReached> {
        error.downcast_ref::<MemoryLimitReached>().copied()
    }
}

impl fmt::Display for MemoryLimitReached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.asked {
            Some(asked) => write!(
                f,
                "the guest asked for a memory of {asked} bytes, past its limit of {} bytes",
                self.limit
            ),
            None => write!(
                f,
                "the host could not give the guest more memory (within its limit of {} bytes)",
                self.limit
            ),
        }
    }
}

impl std::error::Error for MemoryLimitReached {}

/// A store's bound on each of its memories (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryLimiter {
    limit: Option<usize>,
}

impl MemoryLimiter {
    /// Each memory at most `bytes`.
    pub fn new(bytes: usize) -> MemoryLimiter {
        MemoryLimiter { limit: Some(bytes) }
    }

    /// No bound of ours (`None`) or `bytes`.
    pub fn of(bytes: Option<usize>) -> MemoryLimiter {
        MemoryLimiter { limit: bytes }
    }

    /// The bound, if any.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }
}

impl wasmtime::ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        match self.limit {
            Some(limit) if desired > limit => Err(wasmtime::Error::new(MemoryLimitReached {
                limit,
                asked: Some(desired),
            })),
            _ => Ok(true),
        }
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        match self.limit {
            Some(limit) => {
                tracing::debug!("a memory growth within the limit failed: {error:#}");
                Err(wasmtime::Error::new(MemoryLimitReached {
                    limit,
                    asked: None,
                }))
            }
            // Without a limit, as the specification says: memory.grow gives -1.
            None => Ok(()),
        }
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module that grows its memory by `pages` 64 KiB pages and prints nothing.
    fn growing(pages: u32) -> String {
        format!(
            r#"(module (memory 1)
                 (func (export "grow") (result i32) (memory.grow (i32.const {pages}))))"#
        )
    }

    fn grow(limiter: MemoryLimiter, pages: u32) -> wasmtime::Result<i32> {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, growing(pages))?;
        let mut store = wasmtime::Store::new(&engine, limiter);
        store.limiter(|l| l);
        let instance = wasmtime::Instance::new(&mut store, &module, &[])?;
        let f = instance.get_typed_func::<(), i32>(&mut store, "grow")?;
        f.call(&mut store, ())
    }

    #[test]
    fn growth_past_the_limit_traps_with_the_limit_by_type() {
        let e = grow(MemoryLimiter::new(4 << 16), 8).unwrap_err();
        assert_eq!(
            MemoryLimitReached::in_error(&e),
            Some(MemoryLimitReached {
                limit: 4 << 16,
                asked: Some(9 << 16),
            })
        );
        // Within the limit, and without one, the guest grows.
        assert_eq!(grow(MemoryLimiter::new(4 << 16), 3).unwrap(), 1);
        assert_eq!(grow(MemoryLimiter::default(), 100).unwrap(), 1);
    }

    #[test]
    fn an_instantiation_past_the_limit_is_refused_by_type() {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, "(module (memory 10))").unwrap();
        let mut store = wasmtime::Store::new(&engine, MemoryLimiter::new(4 << 16));
        store.limiter(|l| l);
        let e = wasmtime::Instance::new(&mut store, &module, &[]).unwrap_err();
        assert_eq!(
            MemoryLimitReached::in_error(&e).map(|r| r.limit),
            Some(4 << 16)
        );
    }

    #[test]
    fn other_traps_are_not_taken_for_the_limit() {
        let engine = wasmtime::Engine::default();
        let module =
            wasmtime::Module::new(&engine, r#"(module (func (export "f") unreachable))"#).unwrap();
        let mut store = wasmtime::Store::new(&engine, MemoryLimiter::new(1 << 20));
        store.limiter(|l| l);
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let f = instance.get_typed_func::<(), ()>(&mut store, "f").unwrap();
        let e = f.call(&mut store, ()).unwrap_err();
        assert_eq!(MemoryLimitReached::in_error(&e), None);
    }
}
