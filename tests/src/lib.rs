//! # wasm9p-tests: support for end-to-end and interop tests
//!
//! Role: the tests in `tests/tests/` drive real peers over real loopback sockets: our
//! server in a background runtime ([`TestServer`]), Debian's `diod` ([`Diod`]) and its
//! client tools. [`Conn`] is a deliberately plain 9P2000.L connection (one request at
//! a time, raw frames allowed) for asserting exactly what a server answers; it is not
//! the product's client, which lives in `wasm9p-guest-fs`. [`Tree`] builds a declarative
//! file tree in a tempdir. [`fault_proxy::FaultProxy`] sits between a client and a
//! server and delays, drops, reorders or cuts frames on a seeded schedule;
//! [`reply_gate::ReplyGate`] holds back the reply to one chosen request until released.

mod clang;
mod conn;
#[cfg(feature = "cri")]
pub mod cri;
mod diod;
pub mod fault_proxy;
mod fixture;
mod guests;
pub mod linux_vm;
mod reaped;
pub mod reply_gate;
mod rng;
mod script;
mod serve_process;
mod server;

pub use clang::{clang_wasm, parse_cc1_line, zstd_sources, ClangWasm};
pub use conn::Conn;
pub use diod::{diod_available, free_port, Diod};
pub use fixture::{copy_tree, Tree};
pub use guests::{
    arithmetic_module_wat, build_c_component, build_c_http, build_c_http_p3, build_c_plugin,
    c_http, c_http_p3, c_plugin, c_sandbox_guest, compile_c_guest, componentize, guest_source,
    wit_bindgen,
};
pub use reaped::{when_this_process_ends, Reaped};
pub use rng::Rng;
pub use script::{
    example, printed, run_script, run_walkthrough, walkthrough, ScriptRun, StandIns, Walk, Walked,
};
pub use serve_process::{served_addr, spawn_serve};
pub use server::TestServer;

/// Upper bound on anything a test waits for.
pub const TEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// A command for the `wasm9p` binary at `bin` with the module cache the host's tests
/// share (`module-cache` in the test crate's `CARGO_TARGET_TMPDIR`, given as
/// `target_tmpdir`), so that a guest is compiled once per run of the suite.
pub fn wasm9p_command(bin: &str, target_tmpdir: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(bin);
    cmd.env(
        "WASM9P_CACHE_DIR",
        std::path::Path::new(target_tmpdir).join("module-cache"),
    );
    cmd
}
