//! `cargo fuzz run frame_decode`: the 9P frame decoder against arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wasm9p_fuzz::frame_decode(data));
