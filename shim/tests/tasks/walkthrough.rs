//! The book's shim walkthrough (docs/shim.md, "Walkthrough: a guest and a site under
//! containerd") runs as written, against this test binary's containerd: its `sudo ctr`
//! lines become `ctr --address` that containerd's socket (`ctr run` with its FIFOs in
//! the containerd's temporary directory, never the machine's `/run/containerd`), its
//! `sudo install` of the release shim is left out (the shim under test is first on
//! that containerd's `PATH`), and `wasm9p_tests::run_walkthrough` does the rest: the
//! package install and release build left out, the `scripts/build-http` component
//! built by the library call the script makes.

use std::path::Path;

use wasm9p_tests::{printed, run_walkthrough, walkthrough, StandIns};

use crate::containerd::containerd;

#[test]
fn the_shim_walkthrough_runs_a_guest_and_a_site_under_containerd_and_stops_them() {
    let script = walkthrough("shim.md", "Walkthrough: a guest and a site");
    // The site it starts in the background, it stops and waits for, and that ended
    // well (`bash -e`: `wait %1` fails the script when ctr run, and so the task, did
    // not exit 0).
    assert!(
        script.contains("sudo ctr task kill site; wait %1"),
        "{script}"
    );
    let containerd = containerd();
    let ctr = format!("ctr --address {} ", containerd.address.display());
    let ctr_run = format!(
        "{ctr}run --fifo-dir {} ",
        containerd.dir.join("fifo").display()
    );
    let modules = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache");
    let out = run_walkthrough(
        &script,
        &StandIns {
            dropped: &["sudo install target/release/containerd-shim-wasm9p-v1 "],
            rewritten: &[
                ("sudo ctr run ", &ctr_run),
                ("sudo ctr ", &ctr),
                ("sudo rm ", "rm "),
            ],
            ..StandIns::new(&modules)
        },
    );
    assert_eq!(out, printed("shim.md", "A run that worked prints"));
    // Nothing of it is left in containerd: no container, no task.
    for listed in [["container", "ls", "-q"], ["task", "ls", "-q"]] {
        let left = containerd.ctr("default").args(listed).output().unwrap();
        assert_eq!(crate::containerd::text(&left).0, "", "{listed:?}");
    }
}
