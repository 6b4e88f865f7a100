//! # wasm9p-shim: `containerd-shim-wasm9p-v1`
//!
//! What it is: a containerd runtime (`io.containerd.wasm9p.v1`, and so a Kubernetes
//! RuntimeClass) whose tasks are wasm guests on wasm9p's engine, their files served
//! over 9P. It is built on runwasi's `containerd-shim-wasm` (its `Shim`, `Sandbox` and
//! `Compiler`), which speaks containerd's shim protocol and makes each task a Linux
//! container with youki's libcontainer; inside that container, [`sandbox`] runs the
//! task's wasm file:
//! - a preview1 module or a `wasi:cli` component to its end ([`cli_task`]): its exit
//!   code is the task's, its stdio the container's (ctr's terminal, or a CRI log);
//! - a `wasi:http` component ([`http_task`]) with `wasm9p_host::http`, an instance
//!   per request, on the address in `WASMTIME_HTTP_PROXY_SOCKET_ADDR` (runwasi's
//!   wasmtime shim's variable; default `0.0.0.0:8080`).
//!
//! Both start from what the create found ([`prepared`]: the program, its mounts, its
//! module cache, its memory bound), and share that module's reports and notes.
//!
//! [`workload`] tells them apart by what the file exports. The guest's namespace
//! ([`namespace`]): the container's root as `/` through the embedded 9P server
//! (`cache=loose`, `ro` for a read-only root), never copied; the spec's volumes at
//! their destinations (`ro` honoured); `/proc`, `/sys` and `/dev` hidden; and the
//! node-side 9P servers the annotation `wasm9p.io/mounts` names ([`bundle`]).
//!
//! The container cannot see the node's files: it was pivoted into its rootfs before
//! our code runs, and its spec stays on the node. So the shim process keeps a
//! [`broker`] on the node side, reachable from every container it starts through a
//! socket they inherit: it reads a container's spec for it, opens the module cache,
//! and connects to node-side servers, handing the sockets over.
//!
//! Compiled code is kept across containers two ways ([`compiler`]): an image whose
//! wasm comes as OCI wasm layers is precompiled into containerd's content store by
//! runwasi's `Compiler` hook; a wasm file in an ordinary rootfs layer goes through
//! wasm9p's module cache by digest, in the directory [`config`] names.
//!
//! A node gets it with `containerd-shim-wasm9p-v1 install` ([`install`]), which adds
//! the runtime to containerd's configuration and keeps what is there.
//!
//! What it is not: an orchestrator, nor a second engine. Guests run on
//! `wasm9p_host`'s engine and HTTP handler exactly as `wasm9p run` and `wasm9p http`
//! run them; this crate maps a container onto them.
//!
//! ```no_run
//! // The whole binary (src/main.rs):
//! wasm9p_shim::main();
//! ```

pub mod broker;
pub mod bundle;
pub mod cli_task;
pub mod compiler;
pub mod config;
pub mod http_settings;
pub mod http_task;
pub mod install;
pub mod namespace;
pub mod prepared;
pub mod sandbox;
pub mod signals;
pub mod workload;

use containerd_shim_wasm::shim::{Cli, Config, Shim, Version};

/// The runtime's name: containerd runs `containerd-shim-wasm9p-v1` for
/// `io.containerd.wasm9p.v1`.
pub const NAME: &str = "wasm9p";

/// The shim, as runwasi's library knows it.
pub struct Wasm9pShim;

impl Shim for Wasm9pShim {
    type Sandbox = sandbox::Wasm9pSandbox;

    fn name() -> &'static str {
        NAME
    }

    fn version() -> Version {
        containerd_shim_wasm::shim::version!()
    }

    async fn compiler() -> Option<impl containerd_shim_wasm::shim::Compiler> {
        Some(compiler::Precompiler::new())
    }
}

/// The binary: reads the shim's configuration, starts the broker (before runwasi
/// forks anything, so that every container inherits its socket), hands over to
/// runwasi's shim main, and once that returns finishes the compiles its containers
/// handed over (see [`broker`]).
///
/// `install` and `uninstall` as the first argument are the node's commands instead
/// ([`install`]).
pub fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    if install::is_command(&args) {
        std::process::exit(install::main(&args));
    }
    if let Err(why) = containerd_shim::parse(&args) {
        // runwasi's own parse of the same arguments would panic.
        eprintln!(
            "containerd-shim-wasm9p-v1: {why}\n\
             containerd starts this shim itself (runtime io.containerd.wasm9p.v1); by hand: \
             -v for its version, install or uninstall [--dry-run] to put it on a node"
        );
        std::process::exit(2);
    }
    let config = config::ShimConfig::load();
    broker::start(config);
    Wasm9pShim::run(Config {
        default_log_level: "info".into(),
        ..Config::default()
    });
    // containerd has shut this shim down: what its containers left to compile is
    // finished before the process goes (containerd does not wait for it).
    broker::finish_compiles(std::time::Duration::from_secs(600));
}
