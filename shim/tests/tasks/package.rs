//! `scripts/package`, on the binaries under test (the release's are the same
//! binaries, optimized): the tarball a node takes holds the stripped shim and
//! `wasm9p`, which still run, the sample `shim.toml` and the RuntimeClass; the debug
//! tarball holds each binary's debug info, which its `.gnu_debuglink` names.

use std::path::Path;
use std::process::Command;

use crate::containerd::{text, SHIM};

fn sections(binary: &Path) -> String {
    let readelf = Command::new("readelf")
        .arg("-S")
        .arg(binary)
        .output()
        .unwrap();
    assert!(readelf.status.success(), "{:?}", text(&readelf));
    text(&readelf).0
}

#[test]
fn the_package_holds_stripped_binaries_that_run_their_debug_info_apart_and_the_node_files() {
    let bin_dir = Path::new(SHIM).parent().unwrap();
    assert!(
        bin_dir.join("wasm9p").exists(),
        "no wasm9p beside the shim under test: cargo build -p wasm9p-cli (cargo test \
         --workspace builds it)"
    );
    let out = tempfile::tempdir().unwrap();
    let package = Command::new(crate::repo("scripts/package"))
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let (said, err) = text(&package);
    assert!(package.status.success(), "{said}{err}");
    assert!(said.contains("MB stripped"), "{said}");

    let version = env!("CARGO_PKG_VERSION");
    let name = format!("wasm9p-{version}-{}-linux", std::env::consts::ARCH);
    let unpacked = tempfile::tempdir().unwrap();
    for tarball in [format!("{name}.tar.gz"), format!("{name}-debug.tar.gz")] {
        let tar = Command::new("tar")
            .arg("-C")
            .arg(unpacked.path())
            .arg("-xzf")
            .arg(out.path().join(tarball))
            .output()
            .unwrap();
        assert!(tar.status.success(), "{:?}", text(&tar));
    }
    let node = unpacked.path().join(&name);
    let debug = unpacked.path().join(format!("{name}-debug"));
    let mut listed: Vec<String> = walk(&node);
    listed.sort();
    assert_eq!(
        listed,
        [
            "INSTALL",
            "bin/containerd-shim-wasm9p-v1",
            "bin/wasm9p",
            "etc/wasm9p/shim.toml",
            "kubernetes/runtimeclass.yaml"
        ]
    );

    for binary in ["containerd-shim-wasm9p-v1", "wasm9p"] {
        let stripped = node.join("bin").join(binary);
        let built = std::fs::metadata(bin_dir.join(binary)).unwrap().len();
        assert!(std::fs::metadata(&stripped).unwrap().len() < built / 2);
        let kept = sections(&stripped);
        assert!(
            !kept.contains(".debug_line") && !kept.contains(".debug_info"),
            "{kept}"
        );
        assert!(kept.contains(".gnu_debuglink"), "{kept}");
        let link = Command::new("readelf")
            .args(["--string-dump=.gnu_debuglink"])
            .arg(&stripped)
            .output()
            .unwrap();
        assert!(
            text(&link).0.contains(&format!("{binary}.debug")),
            "{:?}",
            text(&link)
        );
        assert!(
            sections(&debug.join("bin").join(format!("{binary}.debug"))).contains(".debug_line")
        );
    }
    // The stripped binaries run.
    let shim = Command::new(node.join("bin/containerd-shim-wasm9p-v1"))
        .arg("-v")
        .output()
        .unwrap();
    assert!(
        shim.status.success() && text(&shim).0.contains("Runtime: wasm9p"),
        "{:?}",
        text(&shim)
    );
    let cli = Command::new(node.join("bin/wasm9p"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(text(&cli).0.trim(), format!("wasm9p {version}"));
    // The node's files.
    let sample = std::fs::read_to_string(node.join("etc/wasm9p/shim.toml")).unwrap();
    assert_eq!(
        wasm9p_shim::config::ShimConfig::parse(&sample).unwrap(),
        Default::default()
    );
    let runtime_class = std::fs::read_to_string(node.join("kubernetes/runtimeclass.yaml")).unwrap();
    assert!(
        runtime_class.contains("kind: RuntimeClass") && runtime_class.contains("handler: wasm9p")
    );
    // And the packaged shim installs as a node would run it (a dry run here).
    let config = unpacked.path().join("config.toml");
    std::fs::write(&config, "version = 2\n").unwrap();
    let dry = Command::new(node.join("bin/containerd-shim-wasm9p-v1"))
        .args(["install", "--dry-run", "--config"])
        .arg(&config)
        .arg("--bin-dir")
        .arg(unpacked.path().join("node-bin"))
        .arg("--shim-config")
        .arg(unpacked.path().join("node-etc/shim.toml"))
        .output()
        .unwrap();
    assert!(dry.status.success(), "{:?}", text(&dry));
    assert!(text(&dry)
        .0
        .contains("would add plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.wasm9p"));
}

#[test]
fn by_hand_a_flag_the_shim_does_not_know_is_one_error_not_a_panic() {
    let version = Command::new(SHIM).arg("-v").output().unwrap();
    assert!(version.status.success() && text(&version).0.contains("Runtime: wasm9p"));
    let bad = Command::new(SHIM).arg("--version").output().unwrap();
    let (_, err) = text(&bad);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("flag provided but not defined: -version") && !err.contains("panicked"),
        "{err}"
    );
}

/// The files under `dir`, as paths relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            files.extend(
                walk(&entry.path())
                    .into_iter()
                    .map(|f| format!("{name}/{f}")),
            );
        } else {
            files.push(name);
        }
    }
    files
}
