//! Replays the seed corpus and a deterministic stream of pseudo-random inputs through
//! the fuzz target body, so the target is exercised on the stable toolchain in CI.

use std::path::Path;

#[test]
fn seeds_replay_without_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/frame_decode");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        wasm9p_fuzz::frame_decode(&std::fs::read(entry.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 5, "seed corpus is missing");
}

#[test]
fn pseudo_random_inputs_do_not_panic() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..20_000 {
        let len = (next() % 300) as usize;
        let mut input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // Make many inputs start with a plausible small frame size.
        if input.len() > 5 && next() % 2 == 0 {
            let size = (next() % 64) as u8 + 7;
            input[1..5].copy_from_slice(&[size, 0, 0, 0]);
        }
        wasm9p_fuzz::frame_decode(&input);
    }
}
