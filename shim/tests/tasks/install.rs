//! `containerd-shim-wasm9p-v1 install` and `uninstall` on the configurations a node
//! has: Debian's `/etc/containerd/config.toml` and the one `containerd config default`
//! writes. Each result is loaded by Debian's containerd (one of its own, started for
//! the check): the CRI plugin must load, with runc still its default runtime and
//! wasm9p beside it. The docs' old snippet, appended by hand as they used to say, is
//! the control: containerd's CRI plugin does not load on it.

use std::path::Path;
use std::process::Command;

use crate::containerd::{plugins_under, text, SHIM};

/// Debian's `/etc/containerd/config.toml` (bookworm's containerd 1.6.20).
const DEBIAN: &str = include_str!("../containerd/debian-config.toml");

/// What docs/shim.md told users to add, before the installer.
const OLD_SNIPPET: &str = r#"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.wasm9p]
  runtime_type = "io.containerd.wasm9p.v1"
  pod_annotations = ["wasm9p.io/*"]
"#;

fn shim(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(SHIM)
        .args(args)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .arg("--bin-dir")
        .arg(dir.join("bin"))
        .arg("--shim-config")
        .arg(dir.join("etc/shim.toml"))
        .output()
        .unwrap();
    let (out, err) = text(&output);
    (output.status.success(), out, err)
}

/// The CRI plugin's line of `ctr plugins ls` under `config` (the opt plugin's
/// directory moved into `dir`, so that the check leaves nothing on the machine).
fn cri_status(dir: &Path, config: &str) -> String {
    let probe = dir.join("probe.toml");
    let opt = dir.join("opt");
    std::fs::write(
        &probe,
        config.replace("/var/lib/containerd/opt", opt.to_str().unwrap()),
    )
    .unwrap();
    let plugins = plugins_under(&probe);
    let line = plugins
        .lines()
        .find(|line| {
            line.split_whitespace()
                .take(2)
                .eq(["io.containerd.grpc.v1", "cri"])
        })
        .unwrap_or_else(|| panic!("no CRI plugin in:\n{plugins}"));
    line.split_whitespace().last().unwrap().to_owned()
}

/// The runtimes containerd reads from `config` (`containerd config dump`).
fn runtimes_dumped(config: &Path) -> toml::Table {
    let dump = Command::new("containerd")
        .arg("--config")
        .arg(config)
        .args(["config", "dump"])
        .output()
        .unwrap();
    assert!(dump.status.success(), "{:?}", text(&dump));
    let mut table: toml::Table = toml::from_str(&text(&dump).0).unwrap();
    for key in ["plugins", "io.containerd.grpc.v1.cri", "containerd"] {
        table = table.remove(key).unwrap().try_into().unwrap();
    }
    assert_eq!(table["default_runtime_name"].as_str(), Some("runc"));
    table.remove("runtimes").unwrap().try_into().unwrap()
}

fn runtime_type(runtimes: &toml::Table, name: &str) -> Option<String> {
    Some(
        runtimes
            .get(name)?
            .get("runtime_type")?
            .as_str()?
            .to_owned(),
    )
}

#[test]
fn install_on_debians_config_keeps_runc_loads_the_cri_plugin_and_is_undone_by_uninstall() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let config = dir.join("config.toml");

    // The control: the docs' old snippet loses runc, and the CRI plugin with it.
    let control = format!("{DEBIAN}{OLD_SNIPPET}");
    assert_eq!(cri_status(dir, &control), "error");
    assert_eq!(cri_status(dir, DEBIAN), "ok");

    std::fs::write(&config, DEBIAN).unwrap();
    // A dry run says what it would do, the change as a diff, and does nothing.
    let (ok, out, err) = shim(dir, &["install", "--dry-run"]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("would copy") && out.contains("would write"),
        "{out}"
    );
    assert!(
        out.contains("would add plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc"),
        "{out}"
    );
    assert!(
        out.contains("+[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.wasm9p]"),
        "{out}"
    );
    assert!(
        out.contains("runtime_type = \"io.containerd.runc.v2\""),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), DEBIAN);
    assert!(!dir.join("bin").exists() && !dir.join("etc").exists());

    let (ok, out, err) = shim(dir, &["install"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("systemctl restart containerd"), "{out}");
    let installed = std::fs::read_to_string(&config).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("config.toml.before-wasm9p")).unwrap(),
        DEBIAN
    );
    assert_eq!(
        std::fs::read(dir.join("bin/containerd-shim-wasm9p-v1")).unwrap(),
        std::fs::read(SHIM).unwrap()
    );
    let shim_config = std::fs::read_to_string(dir.join("etc/shim.toml")).unwrap();
    assert_eq!(
        wasm9p_shim::config::ShimConfig::parse(&shim_config).unwrap(),
        Default::default()
    );
    assert_eq!(cri_status(dir, &installed), "ok");
    let runtimes = runtimes_dumped(&config);
    assert_eq!(
        runtime_type(&runtimes, "runc").as_deref(),
        Some("io.containerd.runc.v2")
    );
    assert_eq!(
        runtime_type(&runtimes, "wasm9p").as_deref(),
        Some("io.containerd.wasm9p.v1")
    );

    // Again: nothing to do, nothing touched.
    let (ok, out, _) = shim(dir, &["install"]);
    assert!(ok && out.contains("nothing to do"), "{out}");
    assert!(
        out.contains("up to date") && out.contains("kept (it parses)"),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), installed);

    // A shim configuration that does not parse fails the install, naming it.
    std::fs::write(dir.join("etc/shim.toml"), "http_reuse = 0\n").unwrap();
    let (ok, _, err) = shim(dir, &["install"]);
    assert!(!ok && err.contains("shim.toml: http_reuse: 0"), "{err}");
    std::fs::write(dir.join("etc/shim.toml"), &shim_config).unwrap();

    let (ok, out, err) = shim(dir, &["uninstall"]);
    assert!(ok, "{out}{err}");
    let uninstalled = std::fs::read_to_string(&config).unwrap();
    assert!(!dir.join("bin/containerd-shim-wasm9p-v1").exists());
    assert!(!dir.join("etc/shim.toml").exists());
    assert_eq!(cri_status(dir, &uninstalled), "ok");
    let runtimes = runtimes_dumped(&config);
    assert_eq!(runtime_type(&runtimes, "wasm9p"), None);
    assert_eq!(
        runtime_type(&runtimes, "runc").as_deref(),
        Some("io.containerd.runc.v2")
    );
    let (ok, out, _) = shim(dir, &["uninstall"]);
    assert!(ok && out.contains("nothing to do"), "{out}");

    // A bad command line is one line and exit 2.
    let bad = Command::new(SHIM)
        .args(["install", "--colour"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).1.contains("unknown option \"--colour\""));
}

#[test]
fn install_on_containerds_own_default_config_changes_only_the_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let default = Command::new("containerd")
        .args(["config", "default"])
        .output()
        .unwrap();
    assert!(default.status.success());
    let default = text(&default).0;
    std::fs::write(dir.join("config.toml"), &default).unwrap();

    let (ok, out, err) = shim(dir, &["install"]);
    assert!(ok, "{out}{err}");
    // runc is in this file already: only the runtime is added, every line kept.
    assert!(!out.contains(".runc"), "{out}");
    let installed = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    let mut lines = installed.lines();
    assert!(default.lines().all(|line| lines.any(|other| other == line)));
    assert_eq!(
        installed.lines().count(),
        default.lines().count() + 5,
        "{installed}"
    );
    let runtimes = runtimes_dumped(&dir.join("config.toml"));
    assert_eq!(
        runtime_type(&runtimes, "wasm9p").as_deref(),
        Some("io.containerd.wasm9p.v1")
    );
    let root = dir.join("root");
    let state = dir.join("state");
    let probe = installed
        .replace("/var/lib/containerd", root.to_str().unwrap())
        .replace("/run/containerd", state.to_str().unwrap())
        .replace("\"/opt/containerd\"", &format!("{:?}", dir.join("opt")));
    assert_eq!(cri_status(dir, &probe), "ok");
}
