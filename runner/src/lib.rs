//! # wasm9p-runner: the build farm's guest runner
//!
//! What runs a `wasm9p worker`'s guests: [`Slots`], `wasm9p-remote`'s
//! [`Guests`](wasm9p_remote::action::Guests) on `wasm9p-host`'s engine, each guest in
//! a slot process that can be killed mid-computation. The worker command wires it;
//! the farm's logic (leases, the CAS, an action's input root and outputs) is
//! `wasm9p-remote`'s, and knows nothing of wasmtime.
//!
//! - [`protocol`]: the requests and replies a worker and its slots exchange, one JSON
//!   line each, as serde types;
//! - [`slots`]: the pool of slot processes the worker keeps: started as actions need
//!   them, the idle ones reused (the warmest first), a guest stopped by killing its
//!   slot; each action's input root served to its slot alone over a Unix socket;
//! - [`slot`]: the slot process's side ([`slot::serve_slot`], what `wasm9p
//!   worker-slot` runs): requests read, programs loaded once, guests run, replies
//!   written;
//! - `programs`: a slot's programs by module digest (compiled code mapped from the
//!   module cache, clang.wasm's tools run as `wasm9p cc` runs them through
//!   `wasm9p_host::toolchain`), a guest's namespace (the input root over 9P with the
//!   slot's shared page cache, the action's `/tmp`), and the engine's outcome turned
//!   into remote's [`Ended`](wasm9p_remote::action::Ended), the one conversion.

mod programs;
pub mod protocol;
pub mod slot;
pub mod slots;

pub use programs::SlotConfig;
pub use slot::{serve_slot, SlotError};
pub use slots::{SlotCommand, Slots};
