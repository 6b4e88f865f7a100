//! `wasm9p:fs/mounts` (world `sandbox` in `wit/fs.wit`): a component mounting file
//! systems in its own namespace at run time, where and from what the host allows.
//!
//! The host grants it with `--allow-mount PREFIX[:SOURCES]` ([`MountGrant`]): the
//! target must be PREFIX or below it, and the source one of SOURCES (a comma-separated
//! list: 9p server addresses as `wasm9p serve` takes them, `export:DIR`, `plugin:FILE`,
//! `bind:DIR`). A grant without SOURCES allows 9p servers reached by address only,
//! never a host directory or a plugin file. Every refusal is a typed error
//! (`denied`, `bad-spec`, `unavailable`, `no-such-mount`), never a trap; a guest the
//! host granted nothing gets `denied`.
//!
//! A mount changes only the calling guest's namespace (a copy of the host's, made on
//! its first mount). Unmounting takes the target out of path resolution; files and
//! directories already open through it keep working until closed.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use super::FsView;
use crate::mounts::{MountKind, MountSpec, Mounted};
use crate::plugin::PluginCompile;

pub(super) mod bindings {
    #![allow(missing_docs)]
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "wasm9p:fs/sandbox",
        imports: { default: async },
        // The world's wasi:filesystem is ours (super::bindings), over wasmtime-wasi's
        // io and clocks: only `mounts` is generated here.
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "wasi:filesystem": crate::p2::bindings::wasi::filesystem,
        },
    });
}

use bindings::wasm9p::fs::mounts::{Host, MountError, MountId, MountInfo, MountStats};

/// One `--allow-mount PREFIX[:SOURCES]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountGrant {
    /// Path components of PREFIX.
    prefix: Vec<String>,
    /// The sources allowed; `None`: 9p servers by address only.
    sources: Option<Vec<Source>>,
}

/// Where a mount comes from, as grants name it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Source {
    /// A 9p server at this address (normalised: `tcp:127.0.0.1:5640`).
    Server(String),
    /// `export:DIR`, `plugin:FILE`, `bind:DIR`.
    Host(&'static str, PathBuf),
}

impl FromStr for MountGrant {
    type Err = String;

    fn from_str(s: &str) -> Result<MountGrant, String> {
        let (prefix, sources) = match s.split_once(':') {
            Some((prefix, sources)) => (prefix, Some(sources)),
            None => (s, None),
        };
        if !prefix.starts_with('/') {
            return Err(format!("{s:?}: PREFIX must be an absolute guest path"));
        }
        let prefix: Vec<String> = prefix
            .split('/')
            .filter(|c| !c.is_empty())
            .map(String::from)
            .collect();
        if prefix.iter().any(|c| c == "." || c == "..") {
            return Err(format!("{s:?}: PREFIX may not contain . or .."));
        }
        let sources = match sources {
            None => None,
            Some(list) => Some(
                list.split(',')
                    .map(|item| parse_source(item).map_err(|e| format!("{s:?}: {e}")))
                    .collect::<Result<Vec<Source>, String>>()?,
            ),
        };
        Ok(MountGrant { prefix, sources })
    }
}

fn parse_source(item: &str) -> Result<Source, String> {
    for kind in ["export", "plugin", "bind"] {
        if let Some(path) = item.strip_prefix(kind).and_then(|r| r.strip_prefix(':')) {
            if path.is_empty() {
                return Err(format!("{kind}: needs a path"));
            }
            return Ok(Source::Host(kind, PathBuf::from(path)));
        }
    }
    let addr: wasm9p_proto::Addr = item.parse().map_err(|e| {
        format!("{item:?} is not export:DIR, plugin:FILE, bind:DIR or an address: {e}")
    })?;
    Ok(Source::Server(addr.to_string()))
}

/// Two host paths name the same file (both resolved; an unresolvable one matches
/// nothing).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

impl MountGrant {
    /// Whether this grant allows `spec`.
    fn allows(&self, spec: &MountSpec) -> bool {
        let target: Vec<&str> = spec.target.split('/').filter(|c| !c.is_empty()).collect();
        let under = target.len() >= self.prefix.len()
            && self.prefix.iter().zip(&target).all(|(p, t)| p == t);
        if !under {
            return false;
        }
        let wanted = match &spec.kind {
            MountKind::NinepRemote { source, .. } => Source::Server(source.to_string()),
            MountKind::NinepEmbedded { export, .. } => Source::Host("export", export.clone()),
            MountKind::Bind { source } => Source::Host("bind", source.clone()),
            MountKind::Plugin { component, .. } => Source::Host("plugin", component.clone()),
            // It reaches nothing: hiding part of its own namespace is the guest's to do.
            MountKind::Empty => return true,
        };
        match (&self.sources, &wanted) {
            (None, Source::Server(_)) => true,
            (None, Source::Host(..)) => false,
            (Some(sources), wanted) => sources.iter().any(|s| match (s, wanted) {
                (Source::Server(a), Source::Server(b)) => a == b,
                (Source::Host(k, a), Source::Host(l, b)) => k == l && same_file(a, b),
                _ => false,
            }),
        }
    }
}

/// The mounts a guest made, and what it may make.
#[derive(Default)]
pub(crate) struct RuntimeMounts {
    pub(crate) grants: Vec<MountGrant>,
    /// How plugins it mounts are compiled and kept.
    pub(crate) plugins: PluginCompile,
    /// Where made mounts are recorded when they go, with the guest's label.
    pub(crate) record: Option<(RuntimeMountRecord, String)>,
    made: Vec<Made>,
    next_id: MountId,
}

struct Made {
    id: MountId,
    /// Its index in the guest's namespace.
    index: usize,
    /// The SPEC as the guest wrote it.
    spec: String,
    mounted: Mounted,
}

/// Where the mounts guests made at run time are recorded as they go (unmounted, or
/// their guest ended): each one's `--stats` entry, with `"spec"` (as the guest wrote it)
/// and `"guest"` (the label given to [`super::WasiP2Fs::record_runtime_mounts`]) added.
pub type RuntimeMountRecord = Arc<Mutex<Vec<serde_json::Value>>>;

impl Made {
    fn record(&self, guest: &str) -> serde_json::Value {
        let mut entry = self.mounted.stats_json();
        entry["spec"] = self.spec.clone().into();
        entry["guest"] = guest.into();
        entry
    }
}

impl RuntimeMounts {
    /// Records `made` where asked, if asked.
    fn record(&self, made: &Made) {
        if let Some((record, guest)) = &self.record {
            let entry = made.record(guest);
            record.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
        }
    }

    fn find(&self, id: MountId) -> Result<&Made, MountError> {
        self.made
            .iter()
            .find(|m| m.id == id)
            .ok_or(MountError::NoSuchMount)
    }
}

impl Drop for RuntimeMounts {
    /// The guest is gone: record what it still had mounted.
    fn drop(&mut self) {
        for made in &self.made {
            self.record(made);
        }
    }
}

impl Host for FsView<'_> {
    async fn mount(&mut self, text: String) -> Result<MountId, MountError> {
        let spec = MountSpec::parse(&text).map_err(|e| MountError::BadSpec(e.to_string()))?;
        let runtime = &self.fs.runtime_mounts;
        if runtime.grants.is_empty() {
            return Err(MountError::Denied(
                "the host allows this guest no mounts (--allow-mount)".into(),
            ));
        }
        if spec.persists() {
            // Its store is a directory of the host's, named by the SPEC.
            return Err(MountError::Denied(
                "cache=fscache keeps a store on the host's disk: only the host's own mounts may use it".into(),
            ));
        }
        if !runtime.grants.iter().any(|g| g.allows(&spec)) {
            return Err(MountError::Denied(format!(
                "no --allow-mount grant covers target {} from this source",
                spec.target
            )));
        }
        let (built, mut mounted) =
            crate::mounts::build(std::slice::from_ref(&spec), &runtime.plugins)
                .await
                .map_err(|e| MountError::Unavailable(e.to_string()))?;
        let backend = built.mounts()[0].backend.clone();
        let mut ns = (*self.fs.ns).clone();
        let index = ns
            .mount(&spec.target, backend, spec.read_only)
            .map_err(|e| MountError::BadSpec(format!("cannot mount at {}: {e}", spec.target)))?;
        self.fs.ns = Arc::new(ns);
        let runtime = &mut self.fs.runtime_mounts;
        runtime.next_id += 1;
        let id = runtime.next_id;
        let mounted = mounted.pop().expect("one spec built, one mount made");
        runtime.made.push(Made {
            id,
            index,
            spec: text,
            mounted,
        });
        Ok(id)
    }

    async fn unmount(&mut self, id: MountId) -> Result<(), MountError> {
        let index = self.fs.runtime_mounts.find(id)?.index;
        let mut ns = (*self.fs.ns).clone();
        ns.detach(index).map_err(|_| MountError::NoSuchMount)?;
        self.fs.ns = Arc::new(ns);
        let runtime = &mut self.fs.runtime_mounts;
        if let Some(at) = runtime.made.iter().position(|m| m.id == id) {
            let made = runtime.made.remove(at);
            runtime.record(&made);
        }
        Ok(())
    }

    async fn list(&mut self) -> Vec<MountInfo> {
        self.fs
            .runtime_mounts
            .made
            .iter()
            .map(|m| MountInfo {
                id: m.id,
                target: m.mounted.spec.target.clone(),
                kind: m.mounted.spec.type_name().into(),
                spec: m.spec.clone(),
            })
            .collect()
    }

    async fn stats(&mut self, id: MountId) -> Result<MountStats, MountError> {
        let made = self.fs.runtime_mounts.find(id)?;
        let Some(s) = made.mounted.stats() else {
            return Ok(MountStats {
                rpc: Vec::new(),
                rpc_total: 0,
                failed_walks: 0,
                dentry_hits: 0,
                dentry_misses: 0,
                negative_hits: 0,
                attr_hits: 0,
                page_hits: 0,
                page_misses: 0,
            });
        };
        Ok(MountStats {
            rpc: s.rpc.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            rpc_total: s.rpc_total,
            failed_walks: s.failed_walks,
            dentry_hits: s.cache.dentry_hits,
            dentry_misses: s.cache.dentry_misses,
            negative_hits: s.cache.negative_hits,
            attr_hits: s.cache.attr_hits,
            page_hits: s.cache.page_hits,
            page_misses: s.cache.page_misses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> MountSpec {
        MountSpec::parse(s).unwrap()
    }

    #[test]
    fn grants_parse_and_allow_what_they_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        let open: MountGrant = "/mnt".parse().unwrap();
        assert!(open.allows(&spec("type=9p,source=tcp:127.0.0.1:5640,target=/mnt/a")));
        assert!(open.allows(&spec("type=9p,source=tcp:127.0.0.1:1,target=/mnt")));
        assert!(!open.allows(&spec("type=9p,source=tcp:127.0.0.1:1,target=/mn")));
        assert!(!open.allows(&spec("type=9p,source=tcp:127.0.0.1:1,target=/etc")));
        // No host directory or plugin without naming it.
        assert!(!open.allows(&spec(&format!("type=bind,source={d},target=/mnt/b"))));
        assert!(!open.allows(&spec(&format!("type=9p,export={d},target=/mnt/b"))));
        let named: MountGrant = format!("/mnt/x:export:{d},tcp:127.0.0.1:5640")
            .parse()
            .unwrap();
        assert!(named.allows(&spec(&format!("type=9p,export={d}/.,target=/mnt/x/e"))));
        assert!(!named.allows(&spec(&format!("type=bind,source={d},target=/mnt/x/e"))));
        assert!(named.allows(&spec("type=9p,source=tcp:127.0.0.1:5640,target=/mnt/x")));
        assert!(!named.allows(&spec("type=9p,source=tcp:127.0.0.1:5641,target=/mnt/x")));
        for bad in ["mnt", "/a/../b", "/mnt:nonsense", "/mnt:export:"] {
            assert!(bad.parse::<MountGrant>().is_err(), "{bad}");
        }
    }
}
