//! `containerd-shim-wasm9p-v1`: see the `wasm9p_shim` crate.

fn main() {
    wasm9p_shim::main();
}
