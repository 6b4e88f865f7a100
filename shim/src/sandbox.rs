//! The task inside its container: runwasi's `Sandbox`.
//!
//! runwasi calls [`Wasm9pSandbox::can_handle`] when the container is created (its
//! answer decides whether the create succeeds) and [`Wasm9pSandbox::run_wasi`] when
//! it is started, both in the container's process. Everything that can be wrong with
//! a task is found at the create ([`prepare`]): no entrypoint in the rootfs, a file
//! that is not wasm, a component with nothing to run, a malformed or refused mount
//! annotation, a node-side server that refuses the connection. Each is one line,
//! written to the container's stderr (ctr's terminal, a CRI log) and logged, and the
//! create fails; the shim goes on. The start then runs what the create prepared: the
//! guest ([`crate::cli_task`]) or the server ([`crate::http_task`]), on a thread of its
//! own, outside runwasi's runtime (wasm9p's engine brings its own).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use containerd_shim_wasm::sandbox::context::{RuntimeContext, Source};
use containerd_shim_wasm::sandbox::Sandbox;
use wasm9p_host::engine::ProgramSource;

use crate::broker::{self, BrokerDial};
use crate::prepared::{report, Prepared};
use crate::workload::{self, Workload};

/// The task's sandbox (runwasi makes one per container, in the container's process).
#[derive(Default)]
pub struct Wasm9pSandbox {
    /// What the create prepared, for the start.
    prepared: Mutex<Option<Result<Prepared, String>>>,
}

impl Sandbox for Wasm9pSandbox {
    async fn can_handle(&self, ctx: &impl RuntimeContext) -> anyhow::Result<()> {
        // Now, not at the start: see `crate::signals`.
        let prepared = crate::signals::watch()
            .map_err(|e| format!("cannot handle signals: {e}"))
            .and_then(|()| prepare(ctx));
        let answer = match &prepared {
            Ok(_) => Ok(()),
            Err(line) => {
                report(line);
                Err(anyhow::anyhow!("{line}"))
            }
        };
        *self.prepared.lock().unwrap_or_else(|e| e.into_inner()) = Some(prepared);
        answer
    }

    async fn run_wasi(&self, ctx: &impl RuntimeContext) -> anyhow::Result<i32> {
        let prepared = self
            .prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_else(|| prepare(ctx));
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(line) => {
                report(&line);
                return Ok(1);
            }
        };
        if let Err(e) = crate::signals::watch() {
            report(&format!("cannot handle signals: {e}"));
            return Ok(1);
        }
        if !prepared.workload.serves() {
            crate::signals::end_process_on_stop();
        }
        // wasm9p's engine starts runtimes of its own: not from inside runwasi's.
        let task = std::thread::Builder::new()
            .name("wasm9p-task".into())
            .spawn(move || match prepared.workload {
                Workload::HttpComponent(_) => crate::http_task::serve(prepared),
                Workload::Module | Workload::CliComponent => crate::cli_task::run(prepared),
            })?;
        Ok(task.join().unwrap_or_else(|_| {
            report("the task's thread panicked");
            1
        }))
    }
}

/// Everything the start will need, checked (see the module docs); the error is one
/// line.
pub fn prepare(ctx: &impl RuntimeContext) -> Result<Prepared, String> {
    if !broker::available() {
        return Err("this shim process has no broker (was it started through its main?)".into());
    }
    let env: Vec<(String, String)> = ctx
        .envs()
        .iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (kv.clone(), String::new()),
        })
        .collect();
    let entrypoint = ctx.entrypoint();
    if entrypoint.func != "_start" {
        return Err(format!(
            "the entrypoint names the function {:?}: wasm9p runs a module's _start or a \
             component's export, give the file alone",
            entrypoint.func
        ));
    }
    let (program, workload, layer_file) = match &entrypoint.source {
        Source::File(path) => {
            let path = resolve(path, &env)?;
            let file = std::fs::File::open(&path)
                .map_err(|e| format!("the entrypoint {}: {e}", path.display()))?;
            let workload = workload::classify(&path.display().to_string(), file)?;
            (ProgramSource::file(path), workload, None)
        }
        Source::Oci(layers) => crate::compiler::program_of_layers(layers)?,
    };
    let mut argv = ctx.args().to_vec();
    if let Some(first) = argv.first_mut() {
        *first = program.path().display().to_string();
    }
    let described = broker::describe()?;
    // Node-side servers are connected now: one that refuses fails the create.
    let dial = Arc::new(BrokerDial::default());
    for source in described.bundle.node_sources() {
        dial.dial_ahead(&source)?;
    }
    let mounts = crate::namespace::mounts(&described, dial)?;
    Ok(Prepared {
        program,
        workload,
        argv,
        env,
        described,
        mounts,
        _layer_file: layer_file,
    })
}

/// The entrypoint's file: a path with a `/` as it is (relative to the working
/// directory), a bare name looked up in the task's `PATH` and then the working
/// directory.
fn resolve(path: &Path, env: &[(String, String)]) -> Result<PathBuf, String> {
    if path.as_os_str().is_empty() {
        return Err("the spec's process has no args: nothing to run".into());
    }
    if path.components().count() > 1 {
        return match path.exists() {
            true => Ok(path.to_owned()),
            false => Err(format!(
                "the entrypoint {} is not in the container's rootfs",
                path.display()
            )),
        };
    }
    let search = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("", |(_, v)| v.as_str());
    search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(path))
        .chain(std::iter::once(path.to_owned()))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            format!(
                "the entrypoint {} is not in the container's rootfs (nor on its PATH)",
                path.display()
            )
        })
}
