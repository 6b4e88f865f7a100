//! The book's walkthroughs run as written: each `Walkthrough:` section of a page in
//! `docs/` (http, plugins, serve, cc, mount), its `sh` blocks joined into one script, run by
//! `wasm9p_tests::run_walkthrough` with the binary under test standing in for the
//! release build, and what it printed checked against what the page says a run that
//! worked prints. The farm's walkthrough has a test of its own (`walkthrough_farm.rs`:
//! it needs root and PostgreSQL), and so do the embedding one
//! (`host/tests/walkthrough_embedding.rs`: it runs the library's examples) and the
//! containerd shim's (`shim/tests/tasks/walkthrough.rs`: it runs against the shim
//! tests' own containerd).

use std::path::Path;

use wasm9p_tests::{printed, run_walkthrough, walkthrough, StandIns};

/// Runs `script` with the `wasm9p` under test standing in for the release build.
fn run(script: &str) -> String {
    let modules = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache");
    run_walkthrough(
        script,
        &StandIns {
            wasm9p: Some(Path::new(env!("CARGO_BIN_EXE_wasm9p"))),
            ..StandIns::new(&modules)
        },
    )
}

#[test]
fn the_plugin_walkthrough_prints_what_the_page_says() {
    let out = run(&walkthrough("plugins.md", "Walkthrough: memfs"));
    assert_eq!(out, printed("plugins.md", "A run that worked prints"));
}

#[test]
fn the_http_walkthrough_serves_one_host_then_a_fleet_that_sees_a_change() {
    let script = walkthrough("http.md", "Walkthrough: one host");
    // Every server it starts, it stops (its last line), and it waits for each.
    assert!(script.contains("kill $(jobs -p); wait"), "{script}");
    let out = run(&script);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "Hello from wasm9p",
            "HTTP/1.1 200 OK",
            "<h1>hi</h1>",
            "<h1>changed</h1>"
        ],
        "{out}"
    );
}

/// Runs the walkthrough under `heading` of `page`, which stops what it started in the
/// background with `stops` and waits for it, and checks that it prints what the page
/// says a run that worked prints.
fn prints_what_the_page_says(page: &str, heading: &str, stops: &str) {
    let script = walkthrough(page, heading);
    assert!(script.contains(stops), "{script}");
    assert_eq!(run(&script), printed(page, "A run that worked prints"));
}

#[test]
fn the_serve_walkthrough_runs_a_guest_on_an_export_and_stops_the_server() {
    prints_what_the_page_says("serve.md", "Walkthrough: one export", "kill %1; wait");
}

#[test]
fn the_cc_walkthrough_builds_the_example_project_through_a_daemon_it_stops() {
    prints_what_the_page_says("cc.md", "Walkthrough: a make project", "kill %1; wait");
}

#[test]
fn the_mount_walkthrough_serves_a_directory_through_fuse_and_unmounts() {
    prints_what_the_page_says(
        "mount.md",
        "Walkthrough: a directory through FUSE",
        "kill %1; wait %1",
    );
}
