//! `cargo fuzz run client_replies`: our 9p client against a scripted hostile server
//! (the input is the server's side of the session).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = wasm9p_fuzz::client::replies(data);
});
