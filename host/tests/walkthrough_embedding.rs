//! The embedding walkthrough of the book (docs/embedding.md) runs as written, with the
//! test builds of `examples/embed.rs` and `examples/http_embed.rs` standing in for its
//! `cargo run --release -p wasm9p-host --example ...` lines (`cargo test` builds a
//! package's examples before it runs its tests; a cargo inside the test would wait for
//! the build directory's lock). The rest is `wasm9p_tests::run_walkthrough`'s: the
//! package install left out, the `scripts/build-http` components built by the same
//! library call the script makes.

use std::path::Path;

use wasm9p_tests::{example, printed, run_walkthrough, walkthrough, StandIns};

#[test]
fn the_embedding_walkthrough_runs_a_guest_and_two_tenants_as_the_page_says() {
    let script = walkthrough("embedding.md", "Walkthrough: a guest");
    // The server it starts in the background, it stops and waits for.
    assert!(script.contains("kill %1; wait"), "{script}");
    let (embed, http_embed) = (example("embed"), example("http_embed"));
    let modules = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache");
    let out = run_walkthrough(
        &script,
        &StandIns {
            examples: &[("embed", &embed), ("http_embed", &http_embed)],
            ..StandIns::new(&modules)
        },
    );
    assert_eq!(out, printed("embedding.md", "A run that worked prints"));
}
