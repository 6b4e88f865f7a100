//! Bindings for `wasi:filesystem@0.3.0` generated from the vendored WIT
//! (`host/wit-p3/`), sharing wasmtime-wasi's `wasi:clocks@0.3.0` types. The functions
//! that return streams get the store (to make them); the rest are WIT `async func`s,
//! run as futures that hold no borrow of the store while they wait.

#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    path: "wit-p3",
    world: "wasm9p:host-p3/filesystem",
    imports: {
        "wasi:filesystem/types.[method]descriptor.read-via-stream": store | trappable,
        "wasi:filesystem/types.[method]descriptor.write-via-stream": store | trappable,
        "wasi:filesystem/types.[method]descriptor.append-via-stream": store | trappable,
        "wasi:filesystem/types.[method]descriptor.read-directory": store | trappable,
        // A close writes back what the file buffers, as 0.2's does.
        "wasi:filesystem/types.[drop]descriptor": async | trappable,
        default: trappable,
    },
    trappable_error_type: {
        "wasi:filesystem/types.error-code" => super::FsError,
    },
    with: {
        "wasi:clocks/types": wasmtime_wasi::p3::bindings::clocks::types,
        "wasi:clocks/system-clock": wasmtime_wasi::p3::bindings::clocks::system_clock,
        "wasi:filesystem/types.descriptor": crate::p2::Descriptor,
    },
});
