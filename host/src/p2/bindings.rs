//! Bindings for `wasi:filesystem` generated from the vendored WIT (`host/wit-p2/`),
//! sharing wasmtime-wasi's `wasi:io` and `wasi:clocks` types.

#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    path: "wit-p2",
    world: "wasm9p:host-p2/filesystem",
    imports: { default: async | trappable },
    trappable_error_type: {
        "wasi:filesystem/types.error-code" => super::FsError,
    },
    with: {
        "wasi:io/poll": wasmtime_wasi::p2::bindings::io::poll,
        "wasi:io/streams": wasmtime_wasi::p2::bindings::io::streams,
        "wasi:io/error": wasmtime_wasi::p2::bindings::io::error,
        "wasi:clocks/wall-clock": wasmtime_wasi::p2::bindings::clocks::wall_clock,
        "wasi:filesystem/types.descriptor": super::Descriptor,
        "wasi:filesystem/types.directory-entry-stream": super::DirectoryStream,
    },
});
