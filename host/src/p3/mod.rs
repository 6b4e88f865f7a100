//! WASI 0.3 for async components, over the same guest-fs namespace as 0.2 and
//! preview1.
//!
//! wasmtime-wasi's `p3` provides every 0.3 interface; we keep its cli, clocks, random
//! and sockets, and replace `wasi:filesystem/types@0.3.0` and `preopens@0.3.0` with
//! our own (bindings from the vendored WIT in `host/wit-p3/`). A component's
//! filesystem is the same [`WasiP2Fs`] as a 0.2 component's, its descriptors the same
//! [`Descriptor`]s in the same resource table, and every filesystem function runs the
//! same descriptor operation as 0.2 does; what 0.3 changes is how they reach the
//! guest:
//!
//! - The `async func`s run as futures that let go of the store before they await:
//!   the guest's other tasks go on while one of them waits for the server.
//! - `read-via-stream` is a `stream<u8>` fed from the open file: a read the page cache
//!   answers is delivered in the same poll, straight into the guest's buffer; a miss
//!   awaits its 9P round trip. `write-via-stream` and `append-via-stream` consume the
//!   guest's stream into the open file (its write-back buffer when it has one), each
//!   write acknowledged when the file took it. `read-directory` is a stream of the
//!   listing. Each ends with a `future<result<_, error-code>>`, as the WIT says.
//! - Error codes are 0.2's, converted one to one (0.3 has the same codes).
//!
//! Components built for 0.3 today still import `wasi:cli@0.2` (and `wasi:io@0.2`)
//! next to `wasi:filesystem@0.3`, so [`add_to_linker`] links all of 0.2 (with our 0.2
//! filesystem) and all of 0.3: a store's data implements [`WasiP2View`] for both.
//! [`P3Program`] runs a component that exports `wasi:cli/run@0.3.x`;
//! [`exports_p3_run`] tells one apart from a 0.2 command.

mod bindings;
mod codes;
mod filesystem;
mod streams;

use wasmtime::component::Linker;

pub use crate::p2::{Descriptor, WasiP2Fs};
use crate::p2::{WasiP2Ctx, WasiP2View};

pub use bindings::wasi::filesystem::types::ErrorCode;

/// A `wasi:filesystem@0.3.0` error, or a trap.
pub type FsError = wasmtime_wasi::TrappableError<ErrorCode>;

/// Adds WASI 0.2 and 0.3 to `linker` (on an async engine with the component model's
/// async support, wasmtime's default): wasmtime-wasi's interfaces, with both
/// versions of `wasi:filesystem` replaced by ours, and `wasm9p:fs/mounts`.
pub fn add_to_linker<T: WasiP2View + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    crate::p2::add_to_linker(linker)?;
    wasmtime_wasi::p3::add_to_linker(linker)?;
    // Ours replace wasmtime-wasi's definitions of the same names.
    linker.allow_shadowing(true);
    bindings::wasi::filesystem::types::add_to_linker::<T, crate::p2::HasFs>(linker, T::filesystem)?;
    bindings::wasi::filesystem::preopens::add_to_linker::<T, crate::p2::HasFs>(
        linker,
        T::filesystem,
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Whether `component` exports `wasi:cli/run` of WASI 0.3 (it is run by
/// [`P3Program`]; a 0.2 command by [`crate::p2::P2Program`]).
pub fn exports_p3_run(
    engine: &wasmtime::Engine,
    component: &wasmtime::component::Component,
) -> bool {
    component
        .component_type()
        .exports(engine)
        .any(|(name, _)| name.starts_with("wasi:cli/run@0.3"))
}

/// A WASI 0.3 command linked once, instantiated per guest.
#[derive(Clone)]
pub struct P3Program {
    pre: wasmtime_wasi::p3::bindings::CommandPre<WasiP2Ctx>,
}

impl P3Program {
    /// Links `component`, which must export `wasi:cli/run@0.3.x`.
    pub fn new(
        engine: &wasmtime::Engine,
        component: &wasmtime::component::Component,
    ) -> wasmtime::Result<Self> {
        let pre = crate::p2::linked(engine, component, add_to_linker)?;
        Ok(P3Program {
            pre: wasmtime_wasi::p3::bindings::CommandPre::new(pre)?,
        })
    }

    /// Runs the component's `wasi:cli/run` over `ctx` until it and every task it
    /// started are done; its exit status (0 for `ok`, 1 for `err`, or what it gave
    /// `exit`).
    pub async fn run(&self, ctx: WasiP2Ctx) -> wasmtime::Result<i32> {
        let mut store = wasmtime::Store::new(self.pre.engine(), ctx);
        store.limiter(|ctx| &mut ctx.limits);
        crate::interrupt::never(&mut store);
        let command = self.pre.instantiate_async(&mut store).await?;
        let result = store
            .run_concurrent(async move |store| command.wasi_cli_run().call_run(store).await)
            .await;
        store.data().fs.close_all().await;
        crate::p2::exit_status(result.and_then(|called| called))
    }
}
