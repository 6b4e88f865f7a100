//! The shim's own configuration: a TOML file on the node, `$WASM9P_SHIM_CONFIG` or
//! else `/etc/wasm9p/shim.toml` (containerd passes its environment to the shims it
//! starts). Without the file, the defaults; with a file that does not parse, every
//! task fails to start with the one line that says why (a runtime that silently
//! ignored a node's settings would run pods in a way nobody configured).
//!
//! The sample below is `shim/shim.toml` (with the defaults; `install` writes it where
//! there is none, and the release package carries it):
#![doc = concat!("```toml\n", include_str!("../shim.toml"), "```")]

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use wasm9p_host::http::{Reuse, MAX_USES};

use crate::http_settings::HttpSettings;

/// The sample configuration, with the defaults (`shim/shim.toml`).
pub const SAMPLE: &str = include_str!("../shim.toml");

/// Where the configuration is read from when `$WASM9P_SHIM_CONFIG` does not say.
pub const DEFAULT_PATH: &str = "/etc/wasm9p/shim.toml";

/// The shim's settings (see the module docs).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ShimConfig {
    /// The module cache's directory on the node; empty: none.
    pub module_cache: PathBuf,
    /// The most bytes of compiled code it keeps.
    pub module_cache_bytes: u64,
    /// Programs from this size up start on the baseline tier when their optimized
    /// code is not kept yet.
    pub tier_from: u64,
    /// The node-side sources the mount annotation may name.
    pub node_sources: Vec<String>,
    /// The 9p mount options of the container's root.
    pub root_options: String,
    /// The 9p mount options of the spec's volumes.
    pub volume_options: String,
    /// The most requests one instance of an HTTP task serves (1: fresh each time).
    pub http_reuse: u32,
    /// How long a kept instance waits for its next request, in milliseconds.
    pub http_reuse_idle_ms: u64,
    /// The node's HTTP limits, as the annotation `wasm9p.io/http` writes them: what a
    /// pod that does not say gets ([`crate::http_settings`]).
    pub http_limits: String,
    /// The most a pod's annotation may ask, in the same form.
    pub http_limits_max: String,
}

impl Default for ShimConfig {
    fn default() -> ShimConfig {
        ShimConfig {
            module_cache: PathBuf::from("/var/lib/wasm9p/modules"),
            module_cache_bytes: 4 << 30,
            tier_from: wasm9p_host::module_cache::ModuleCache::DEFAULT_TIER_FROM,
            node_sources: vec!["unix:/run/wasm9p/".into()],
            root_options: "cache=loose".into(),
            // A volume may change behind the container (a ConfigMap's update, a
            // sidecar's writes): trusted for a second, then checked.
            volume_options: "cache=loose,revalidate=1000".into(),
            http_reuse: Reuse::default().uses,
            http_reuse_idle_ms: Reuse::default().idle.as_millis() as u64,
            http_limits: String::new(),
            http_limits_max: "max-instances=256,queue=4096,timeout=300s,memory=1G".into(),
        }
    }
}

impl ShimConfig {
    /// The node's configuration (see the module docs): the error is one line naming
    /// the file.
    pub fn load() -> Result<ShimConfig, String> {
        let (path, given) = match std::env::var_os("WASM9P_SHIM_CONFIG") {
            Some(path) if !path.is_empty() => (PathBuf::from(path), true),
            _ => (PathBuf::from(DEFAULT_PATH), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !given => {
                return Ok(ShimConfig::default())
            }
            Err(e) => return Err(format!("shim config {}: {e}", path.display())),
        };
        ShimConfig::parse(&text).map_err(|why| format!("shim config {}: {why}", path.display()))
    }

    /// Parses the TOML text of a configuration; the error is one line.
    pub fn parse(text: &str) -> Result<ShimConfig, String> {
        let config: ShimConfig = toml::from_str(text).map_err(|e| {
            let message = e.message().lines().next().unwrap_or_default().to_owned();
            match e.span() {
                Some(span) => {
                    let line = text[..span.start].matches('\n').count() + 1;
                    format!("line {line}: {message}")
                }
                None => message,
            }
        })?;
        for (key, options) in [
            ("root_options", &config.root_options),
            ("volume_options", &config.volume_options),
        ] {
            // Checked here, once, as the mounts will take them.
            let spec = format!("type=9p,export=/,target=/,{options}");
            wasm9p_host::mounts::MountSpec::parse(&spec).map_err(|e| match e {
                wasm9p_host::mounts::MountError::Spec { why, .. } => format!("{key}: {why}"),
                other => format!("{key}: {other}"),
            })?;
        }
        for source in &config.node_sources {
            let full = source.trim_end_matches(['/', ':']);
            if !["unix:", "vsock:", "fc-vsock:", "tcp:"]
                .iter()
                .any(|scheme| full.starts_with(scheme))
            {
                return Err(format!(
                    "node_sources: {source:?} is not an address or an address prefix \
                     (unix:, vsock:, fc-vsock: or tcp:)"
                ));
            }
        }
        if !(1..=MAX_USES).contains(&config.http_reuse) {
            return Err(format!(
                "http_reuse: {} is not from 1 to {MAX_USES}",
                config.http_reuse
            ));
        }
        if config.http_reuse_idle_ms == 0 {
            return Err("http_reuse_idle_ms: must be above 0".into());
        }
        let max = HttpSettings::parse(&config.http_limits_max)
            .map_err(|why| format!("http_limits_max: {why}"))?;
        HttpSettings::parse(&config.http_limits)
            .and_then(|limits| limits.within(&max))
            .map_err(|why| format!("http_limits: {why}"))?;
        Ok(config)
    }

    /// Whether the annotation may name `source`: it is one of `node_sources`, or
    /// starts with one that ends in `/` or `:`.
    pub fn allows_source(&self, source: &str) -> bool {
        self.node_sources.iter().any(|allowed| {
            source == allowed
                || ((allowed.ends_with('/') || allowed.ends_with(':'))
                    && source.starts_with(allowed.as_str()))
        })
    }

    /// The node's HTTP limits (checked when the file was parsed).
    pub fn http_limits(&self) -> HttpSettings {
        HttpSettings::parse(&self.http_limits).unwrap_or_default()
    }

    /// The most a pod may ask (checked when the file was parsed).
    pub fn http_limits_max(&self) -> HttpSettings {
        HttpSettings::parse(&self.http_limits_max).unwrap_or_else(|_| HttpSettings::default_max())
    }

    /// The module cache it names, if any.
    pub fn module_cache_dir(&self) -> Option<&std::path::Path> {
        (!self.module_cache.as_os_str().is_empty()).then_some(self.module_cache.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_file_is_the_defaults_and_keys_override_them() {
        assert_eq!(ShimConfig::parse("").unwrap(), ShimConfig::default());
        let config = ShimConfig::parse(
            "module_cache = \"\"\nnode_sources = [\"unix:/srv/9p.sock\", \"vsock:2:\"]\n\
             volume_options = \"cache=none\"\n",
        )
        .unwrap();
        assert_eq!(config.module_cache_dir(), None);
        assert_eq!(config.volume_options, "cache=none");
        assert_eq!(config.root_options, "cache=loose");
        assert!(config.allows_source("unix:/srv/9p.sock"));
        assert!(!config.allows_source("unix:/srv/9p.sock2"));
        assert!(config.allows_source("vsock:2:564"));
        assert!(!config.allows_source("vsock:3:564"));
        let defaults = ShimConfig::default();
        assert!(defaults.allows_source("unix:/run/wasm9p/node.sock"));
        assert!(!defaults.allows_source("unix:/run/containerd/containerd.sock"));
        assert!(!defaults.allows_source("unix:/run/wasm9p"));
        assert_eq!(
            (defaults.http_reuse, defaults.http_reuse_idle_ms),
            (1, 10_000)
        );
        let reusing = ShimConfig::parse("http_reuse = 100\nhttp_reuse_idle_ms = 2500\n").unwrap();
        assert_eq!(
            (reusing.http_reuse, reusing.http_reuse_idle_ms),
            (100, 2500)
        );
    }

    #[test]
    fn the_sample_is_the_defaults_and_names_every_key() {
        assert_eq!(ShimConfig::parse(SAMPLE).unwrap(), ShimConfig::default());
        let keys = toml::from_str::<toml::Table>(SAMPLE).unwrap();
        let all = toml::Table::try_from(ShimConfig::default()).unwrap();
        assert_eq!(
            keys.keys().collect::<Vec<_>>(),
            all.keys().collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_bad_file_is_one_line_that_says_where() {
        for (text, needle) in [
            (
                "module_cach = \"/x\"\n",
                "line 1: unknown field `module_cach`",
            ),
            ("\nmodule_cache_bytes = \"big\"\n", "line 2: invalid type"),
            ("volume_options = \"cache=strict\"\n", "volume_options:"),
            ("root_options = \"colour=blue\"\n", "root_options:"),
            ("node_sources = [\"/run/9p.sock\"]\n", "not an address"),
            ("http_reuse = 0\n", "http_reuse: 0 is not from 1"),
            (
                "http_reuse_idle_ms = 0\n",
                "http_reuse_idle_ms: must be above 0",
            ),
            (
                "http_limits = \"queue=lots\"\n",
                "http_limits: queue=\"lots\"",
            ),
            (
                "http_limits = \"max-instances=300\"\n",
                "http_limits: max-instances=300 is past the node's bound, 256",
            ),
            (
                "http_limits_max = \"colour=blue\"\n",
                "http_limits_max: unknown key",
            ),
        ] {
            let err = ShimConfig::parse(text).unwrap_err();
            assert!(err.contains(needle) && !err.contains('\n'), "{text}: {err}");
        }
    }
}
