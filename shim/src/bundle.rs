//! What a container's OCI spec says that its guest's setup needs, read on the node
//! side (the [`crate::broker`] reads the spec for the container, which cannot see it):
//! whether the root is read-only, the volumes, the memory limit, the node-side
//! mounts the annotation [`ANNOTATION`] names, and the HTTP limits the annotation
//! [`HTTP_ANNOTATION`] sets within the node's bounds ([`crate::http_settings`]).
//!
//! The annotation holds mount SPECs as `wasm9p run --mount` takes them, separated by
//! `;` or new lines, each a 9P server at an address:
//! `type=9p,source=unix:/run/wasm9p/node.sock,aname=/srv/site,target=/data,cache=loose`.
//! Only sources the node's configuration allows ([`crate::config::ShimConfig`]'s
//! `node_sources`) are taken: a pod's author writes annotations, and must not reach
//! any socket of the node.

use oci_spec::runtime::Spec;
use serde::{Deserialize, Serialize};
use wasm9p_host::mounts::{MountError, MountKind, MountSpec};

use crate::config::ShimConfig;
use crate::http_settings::HttpSettings;
pub use crate::http_settings::ANNOTATION as HTTP_ANNOTATION;

/// The annotation naming node-side mounts (for Kubernetes, a pod annotation that
/// containerd's CRI passes on: list it in the runtime's `pod_annotations`).
pub const ANNOTATION: &str = "wasm9p.io/mounts";

/// A volume of the spec: a mount the container has at `destination`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Where, in the container (and so in the guest's namespace).
    pub destination: String,
    /// Mounted read-only.
    pub read_only: bool,
}

/// The parts of a container's spec its guest's setup needs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bundle {
    /// The root is read-only (`ctr run --read-only`, `readOnlyRootFilesystem`).
    pub root_read_only: bool,
    /// The spec's mounts but the system's own (`/proc`, `/sys`, `/dev` and under).
    pub volumes: Vec<Volume>,
    /// The annotation's mounts, each a checked SPEC.
    pub node_mounts: Vec<String>,
    /// `linux.resources.memory.limit`, when positive.
    pub memory_limit: Option<u64>,
    /// The HTTP limits: the annotation's, over the node's ([`crate::http_settings`]).
    pub http: HttpSettings,
}

/// The mount points under which the kernel's own file systems live: never a volume,
/// and hidden from guests (see `crate::namespace`).
pub const SYSTEM_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Whether `path` is one of [`SYSTEM_DIRS`] or under one.
pub fn is_system(path: &str) -> bool {
    SYSTEM_DIRS.iter().any(|dir| {
        path == *dir
            || path
                .strip_prefix(dir)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

impl Bundle {
    /// Reads `spec`, with the node's `config`; the error is one line (a malformed or
    /// refused annotation).
    pub fn of(spec: &Spec, config: &ShimConfig) -> Result<Bundle, String> {
        let root_read_only = spec
            .root()
            .as_ref()
            .and_then(|root| root.readonly())
            .unwrap_or(false);
        let volumes = spec
            .mounts()
            .iter()
            .flatten()
            .filter_map(|mount| {
                let destination = mount.destination().to_str()?.trim_end_matches('/');
                if destination.is_empty() || is_system(destination) {
                    return None;
                }
                let read_only = mount
                    .options()
                    .iter()
                    .flatten()
                    .any(|option| option == "ro");
                Some(Volume {
                    destination: destination.to_owned(),
                    read_only,
                })
            })
            .collect();
        let memory_limit = spec
            .linux()
            .as_ref()
            .and_then(|linux| linux.resources().as_ref())
            .and_then(|resources| resources.memory().as_ref())
            .and_then(|memory| memory.limit())
            .and_then(|limit| u64::try_from(limit).ok())
            .filter(|limit| *limit > 0);
        let node_mounts = match spec.annotations().as_ref().and_then(|a| a.get(ANNOTATION)) {
            Some(value) => node_mounts(value, config)?,
            None => Vec::new(),
        };
        let http = match spec
            .annotations()
            .as_ref()
            .and_then(|a| a.get(HTTP_ANNOTATION))
        {
            Some(value) => HttpSettings::parse(value)
                .and_then(|pod| pod.within(&config.http_limits_max()).map(|()| pod))
                .map_err(|why| format!("annotation {HTTP_ANNOTATION}: {why}"))?,
            None => HttpSettings::default(),
        };
        Ok(Bundle {
            root_read_only,
            volumes,
            node_mounts,
            memory_limit,
            http: http.over(&config.http_limits()),
        })
    }

    /// The addresses the annotation's mounts name, each once, as an address prints.
    pub fn node_sources(&self) -> Vec<String> {
        let mut sources: Vec<String> = self
            .node_mounts
            .iter()
            .filter_map(|spec| match MountSpec::parse(spec) {
                Ok(MountSpec {
                    kind: MountKind::NinepRemote { source, .. },
                    ..
                }) => Some(source.to_string()),
                _ => None,
            })
            .collect();
        sources.sort();
        sources.dedup();
        sources
    }

    /// Whether the annotation names a mount of `source` (an address as it prints).
    pub fn names_source(&self, source: &str) -> bool {
        self.node_sources().iter().any(|s| s == source)
    }
}

/// The annotation's SPECs, each checked: a 9P server at an address the node allows,
/// mounted anywhere but `/` and the system's directories.
fn node_mounts(value: &str, config: &ShimConfig) -> Result<Vec<String>, String> {
    let bad =
        |spec: &str, why: String| format!("annotation {ANNOTATION}: bad mount {spec:?}: {why}");
    let mut specs = Vec::new();
    for spec in value
        .split([';', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let parsed = MountSpec::parse(spec).map_err(|e| match e {
            MountError::Spec { why, .. } => bad(spec, why),
            other => bad(spec, other.to_string()),
        })?;
        let MountKind::NinepRemote { source, .. } = &parsed.kind else {
            return Err(bad(
                spec,
                "the annotation names node-side 9P servers: type=9p,source=ADDR".into(),
            ));
        };
        let source = source.to_string();
        if !config.allows_source(&source) {
            return Err(bad(
                spec,
                format!(
                    "{source} is not among the node's allowed sources ({})",
                    config.node_sources.join(", ")
                ),
            ));
        }
        if parsed.target == "/" || is_system(&parsed.target) {
            return Err(bad(
                spec,
                format!("{} is the container's own", parsed.target),
            ));
        }
        specs.push(spec.to_owned());
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> Spec {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_specs_volumes_root_and_limit_are_read_and_system_mounts_left_out() {
        let spec = spec(serde_json::json!({
            "ociVersion": "1.0.2",
            "root": { "path": "rootfs", "readonly": true },
            "mounts": [
                { "destination": "/proc", "type": "proc", "source": "proc" },
                { "destination": "/dev/pts", "type": "devpts", "source": "devpts" },
                { "destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup" },
                { "destination": "/data", "type": "bind", "source": "/srv/d",
                  "options": ["rbind", "ro"] },
                { "destination": "/cache/", "type": "bind", "source": "/srv/c",
                  "options": ["rbind", "rw"] },
                { "destination": "/etc/hosts", "type": "bind", "source": "/h",
                  "options": ["rbind", "ro"] },
                { "destination": "/device", "type": "bind", "source": "/d" }
            ],
            "linux": { "resources": { "memory": { "limit": 67108864 } } }
        }));
        let bundle = Bundle::of(&spec, &ShimConfig::default()).unwrap();
        assert!(bundle.root_read_only);
        assert_eq!(bundle.memory_limit, Some(64 << 20));
        let volumes: Vec<(&str, bool)> = bundle
            .volumes
            .iter()
            .map(|v| (v.destination.as_str(), v.read_only))
            .collect();
        assert_eq!(
            volumes,
            [
                ("/data", true),
                ("/cache", false),
                ("/etc/hosts", true),
                ("/device", false)
            ]
        );
        assert!(bundle.node_mounts.is_empty());

        let bare = Bundle::of(&spec_without_anything(), &ShimConfig::default()).unwrap();
        assert_eq!(
            (bare.root_read_only, bare.memory_limit, bare.volumes.len()),
            (false, None, 0)
        );
    }

    fn spec_without_anything() -> Spec {
        spec(serde_json::json!({ "ociVersion": "1.0.2" }))
    }

    fn with_annotation(value: &str) -> Spec {
        spec(serde_json::json!({
            "ociVersion": "1.0.2",
            "annotations": { ANNOTATION: value }
        }))
    }

    #[test]
    fn the_annotation_names_node_side_servers_the_node_allows() {
        let value =
            "type=9p,source=unix:/run/wasm9p/node.sock,aname=/srv/site,target=/data,cache=loose;\n\
                     type=9p,source=unix:/run/wasm9p/other.sock,target=/more";
        let bundle = Bundle::of(&with_annotation(value), &ShimConfig::default()).unwrap();
        assert_eq!(bundle.node_mounts.len(), 2);
        assert!(bundle.names_source("unix:/run/wasm9p/node.sock"));
        assert!(!bundle.names_source("unix:/run/wasm9p/elsewhere.sock"));

        for (value, needle) in [
            (
                "type=9p,source=unix:/run/wasm9p/n.sock,target=/d,colour=blue",
                "unknown key",
            ),
            (
                "type=9p,source=unix:/run/containerd/containerd.sock,target=/d",
                "not among the node's allowed sources",
            ),
            ("type=bind,source=/etc,target=/d", "node-side 9P servers"),
            ("type=9p,export=/etc,target=/d", "node-side 9P servers"),
            (
                "type=9p,source=unix:/run/wasm9p/n.sock,target=/",
                "the container's own",
            ),
            (
                "type=9p,source=unix:/run/wasm9p/n.sock,target=/proc/x",
                "the container's own",
            ),
            (
                "type=9p,source=unix:/run/wasm9p/n.sock",
                "target= is missing",
            ),
        ] {
            let err = Bundle::of(&with_annotation(value), &ShimConfig::default()).unwrap_err();
            assert!(
                err.starts_with("annotation wasm9p.io/mounts: bad mount")
                    && err.contains(needle)
                    && !err.contains('\n'),
                "{value}: {err}"
            );
        }
    }

    #[test]
    fn system_dirs_are_told_by_component() {
        for path in ["/proc", "/proc/self", "/sys/fs", "/dev", "/dev/shm"] {
            assert!(is_system(path), "{path}");
        }
        for path in ["/", "/process", "/device", "/data/proc"] {
            assert!(!is_system(path), "{path}");
        }
    }
}
