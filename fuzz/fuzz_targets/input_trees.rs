//! `cargo fuzz run input_trees`: input roots a client could send a worker, through the
//! tree check (see `wasm9p_fuzz::trees`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wasm9p_fuzz::trees::trees(data);
});
