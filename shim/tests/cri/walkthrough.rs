//! The book's CRI walkthrough (docs/shim.md, "Walkthrough: a pod through containerd's
//! CRI") runs as written from its `export CONTAINER_RUNTIME_ENDPOINT` on, against the
//! CRI tests' containerd, whose configuration the shim's installer made from Debian's
//! default `config.toml` (what the walkthrough's `install` and restart do on a node,
//! so those lines are left out): the endpoint becomes that containerd's socket, `sudo
//! ctr` its `ctr --address`, and `sudo crictl` the test build of the stand-in
//! `shim/examples/crictl.rs` (no Debian package has crictl). The rest is
//! `wasm9p_tests::run_walkthrough`'s: the package install and release build left out,
//! the `scripts/build-http` component built by the library call the script makes.

use std::path::Path;

use wasm9p_tests::{example, printed, run_walkthrough, walkthrough, StandIns};

#[test]
fn the_cri_walkthrough_runs_a_guest_and_a_site_in_a_pod_and_removes_them() {
    let script = walkthrough("shim.md", "Walkthrough: a pod through containerd's CRI");
    // It goes through the CRI with the wasm9p handler, and ends by looking for the pod.
    assert!(
        script.contains("POD=$(sudo crictl runp --runtime wasm9p pod.json)"),
        "{script}"
    );
    assert!(
        script.contains("sudo crictl pods -q --name wasm9p-demo"),
        "{script}"
    );
    let node = super::node();
    // The pause image the node's configuration names (the kubelet's node would pull it).
    super::images(node);
    let socket = node.address.display().to_string();
    let ctr = format!("ctr --address {socket} ");
    let endpoint = format!("unix://{socket}");
    let crictl = format!("{} ", example("crictl").display());
    let modules = Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache");
    let out = run_walkthrough(
        &script,
        &StandIns {
            dropped: &[
                "sudo target/release/containerd-shim-wasm9p-v1 install",
                "sudo systemctl restart containerd",
            ],
            rewritten: &[("sudo ctr ", &ctr), ("sudo rm ", "rm ")],
            replaced: &[
                ("unix:///run/containerd/containerd.sock", &endpoint),
                ("sudo crictl ", &crictl),
            ],
            ..StandIns::new(&modules)
        },
    );
    assert_eq!(out, printed("shim.md", "A pod that worked prints"));
}
