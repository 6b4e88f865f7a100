//! `cargo fuzz run namespace_ops`: operation sequences on a 9p mount, checked against
//! the same sequence on a bind mount.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    wasm9p_fuzz::namespace::sequence(data);
});
