//! Embedding wasm9p in your own wasmtime host.
//!
//! Runs a WASI preview1 guest whose `/` is HOSTDIR served by the in-process 9P server
//! with `cache=loose`, keeping state of our own (a call counter) in the store next to
//! the guest's WASI context, then prints the guest's exit status and the mount's
//! statistics:
//!
//! ```sh
//! cargo run --release -p wasm9p-host --example embed -- GUEST.wasm HOSTDIR [ARGS]...
//! ```

use std::time::Instant;

use wasm9p_host::mounts::MountTable;
use wasm9p_host::p1::{self, WasiP1Ctx, WasiP1View};
use wasmtime::{bail, format_err, Engine, Linker, Module, Store};

/// The store's data: the guest's WASI state and whatever else the embedder keeps.
struct Guest {
    wasi: WasiP1Ctx,
    host_calls: u64,
}

impl WasiP1View for Guest {
    fn wasi_p1(&mut self) -> &mut WasiP1Ctx {
        self.host_calls += 1;
        &mut self.wasi
    }
}

fn main() -> wasmtime::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(guest), Some(dir)) = (args.next(), args.next()) else {
        bail!("usage: embed GUEST.wasm HOSTDIR [ARGS]...");
    };
    let started = Instant::now();

    // The mounts live on a tokio runtime; the guest runs on this thread, outside it.
    let runtime = tokio::runtime::Runtime::new()?;
    let mounts = runtime.block_on(
        MountTable::builder()
            .mount(&format!("type=9p,export={dir},target=/,cache=loose"))?
            .build(),
    )?;

    let engine = Engine::default();
    let module =
        Module::from_file(&engine, &guest).map_err(|e| format_err!("loading {guest}: {e}"))?;
    let mut linker = Linker::new(&engine);
    p1::add_to_linker(&mut linker)?;

    let wasi = WasiP1Ctx::builder(mounts.namespace().clone(), runtime.handle().clone())
        .arg(guest.clone())
        .args(args)
        .env("EMBEDDED_BY", "examples/embed.rs")
        .build();
    let mut store = Store::new(
        &engine,
        Guest {
            wasi,
            host_calls: 0,
        },
    );
    let instance = linker.instantiate(&mut store, &module)?;
    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
    let result = start.call(&mut store, ());
    // Write back what the guest left open before reading the result.
    store.data_mut().wasi.close_all();
    let status = p1::exit_status(result)?;

    let wall_ms = started.elapsed().as_millis() as u64;
    eprintln!(
        "exit status {status} after {} WASI calls",
        store.data().host_calls
    );
    eprintln!("{}", mounts.stats_json(1, wall_ms));
    std::process::exit(status);
}
