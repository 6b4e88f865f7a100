//! `cargo fuzz run server_requests`: our server's request handling (after a valid
//! version and attach) against arbitrary bytes, on a small export.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wasm9p_fuzz::server::requests(data);
});
