//! Mount SPECs (`--mount`, `--dir`) and the namespace they build.
//!
//! Docker-style `key=value,...` lists, as in the CLI contract:
//! - `type=9p,source=ADDR,aname=NAME,target=/g[,OPTION]...`, the options those of
//!   `wasm9p_guest_fs::mount_options::OPTION_KEYS`
//!   (a remote server at any transport address; `reconnect=on` re-establishes a
//!   dropped connection, see `wasm9p_guest_fs::client::ClientConfig::reconnect`;
//!   `cache=fscache[,cachetag=NAME][,fscache_dir=DIR][,fscache_size=BYTES]` keeps the
//!   cache on disk for later processes, see `wasm9p_guest_fs::fscache`: the store is
//!   named `ADDR ANAME` unless `cachetag=` says, `export:DIR` for an embedded export);
//! - `type=9p,export=HOSTDIR,target=/g[,security_model=passthrough|mapped-xattr|mapped-file][,allow_devices][,...]`
//!   (the embedded default: our server in process, over an in-memory duplex; no
//!   socket, no setup; the security model as `wasm9p serve --security-model` has it);
//! - `type=bind,source=HOSTDIR,target=/g[,ro]`, which is what `--dir HOSTDIR::/g` means;
//! - `type=plugin,component=FILE.wasm,target=/g[,instances=N][,fuel=N][,call_timeout=S][,cache=..]...`: a
//!   file system written as a component (world `fs-plugin` of `wit/fs.wit`; see
//!   [`crate::plugin`]), with the 9p mount options;
//! - `type=empty,target=/g`: an empty read-only directory over whatever another mount
//!   has at `/g`, hiding it (the containerd shim hides a container's `/proc`, `/sys`
//!   and `/dev` this way).
//!
//! Values cannot contain commas. Every mistake is one line naming the SPEC and what is
//! wrong with it.

use std::path::PathBuf;
use std::sync::Arc;

use wasm9p_guest_fs::backend::bind::BindFs;
use wasm9p_guest_fs::backend::memory::MemoryFs;
use wasm9p_guest_fs::backend::ninep::{MountStats, NinepFs};
use wasm9p_guest_fs::cache::SharedCache;
use wasm9p_guest_fs::client::{ClientConfig, Dialer, Session};
use wasm9p_guest_fs::mount_options::{NinepOptions, OptionError, OptionKey};
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::Addr;
use wasm9p_server::{ExportConfig, ExportConfigError, SecurityModel, Server, ServerConfig};

use crate::module_cache::{ModuleCache, TierChoice, UpgradeIn};
use crate::plugin::{PluginCompile, PluginFs, PluginLimits};

/// One mount to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    /// Where in the guest namespace (absolute).
    pub target: String,
    /// What.
    pub kind: MountKind,
    /// Read-only for the guest.
    pub read_only: bool,
}

/// An embedded export's security model and whether it makes device nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportSecurity {
    /// `security_model=passthrough|mapped-xattr|mapped-file`.
    pub model: SecurityModel,
    /// `allow_devices` (passthrough only).
    pub allow_devices: bool,
}

impl ExportSecurity {
    /// The server's configuration of an export of `dir` kept this way.
    pub fn export(&self, dir: impl Into<std::path::PathBuf>, read_only: bool) -> ExportConfig {
        ExportConfig {
            read_only,
            security_model: self.model,
            allow_devices: self.allow_devices,
            ..ExportConfig::new(dir)
        }
    }
}

/// What a mount is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountKind {
    /// A 9P server reached at an address.
    NinepRemote {
        /// Where the server listens.
        source: Addr,
        /// Which export.
        aname: String,
        /// Cache mode and the rest.
        options: NinepOptions,
    },
    /// A host directory served by an in-process 9P server.
    NinepEmbedded {
        /// The directory.
        export: PathBuf,
        /// Cache mode and the rest.
        options: NinepOptions,
        /// How the in-process server keeps owners, modes and special files
        /// (`security_model=`, `allow_devices`; see `wasm9p_server::security`).
        security: ExportSecurity,
    },
    /// A host directory, directly.
    Bind {
        /// The directory.
        source: PathBuf,
    },
    /// An empty read-only directory, hiding what another mount has there.
    Empty,
    /// A filesystem written as a component (world `wasm9p:fs/fs-plugin`), served to
    /// the 9p client in process.
    Plugin {
        /// The component file.
        component: PathBuf,
        /// Cache mode and the rest, as for a 9p mount.
        options: NinepOptions,
        /// Instances, fuel and time per call.
        limits: PluginLimits,
    },
}

/// Why a mount could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The SPEC itself is wrong.
    #[error("bad mount {spec:?}: {why}")]
    Spec {
        /// The SPEC as given.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// The SPEC is fine but the mount failed (server unreachable, directory missing...).
    #[error("cannot mount {target}: {why}")]
    Mount {
        /// The guest path.
        target: String,
        /// Why.
        why: String,
    },
}

fn spec_error(spec: &str, why: impl Into<String>) -> MountError {
    MountError::Spec {
        spec: spec.into(),
        why: why.into(),
    }
}

impl MountSpec {
    /// Parses a `--mount` SPEC.
    pub fn parse(spec: &str) -> Result<MountSpec, MountError> {
        let mut ty = None;
        let mut target = None;
        let mut source = None;
        let mut export = None;
        let mut aname = String::new();
        let mut component = None;
        let mut options: Vec<(&str, Option<&str>)> = Vec::new();
        let mut read_only = false;
        let mut limits = PluginLimits::default();
        let mut plugin_key = None;
        let mut security = ExportSecurity::default();
        let mut security_key = None;
        for item in spec.split(',').filter(|s| !s.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            let need = || {
                value
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| spec_error(spec, format!("{key}= needs a value")))
            };
            match key {
                "type" => ty = Some(need()?),
                "target" | "destination" | "dst" => target = Some(need()?),
                "source" | "src" => source = Some(need()?),
                "export" => export = Some(need()?),
                "aname" => aname = value.unwrap_or_default().to_owned(),
                "component" => component = Some(need()?),
                "instances" | "fuel" | "call_timeout" => {
                    limits.set(key, need()?).map_err(|e| spec_error(spec, e))?;
                    plugin_key = Some(key);
                }
                "ro" | "readonly" if value.is_none() => read_only = true,
                "security_model" => {
                    security.model = need()?.parse().map_err(|e: String| spec_error(spec, e))?;
                    security_key = Some(key);
                }
                "allow_devices" if value.is_none() => {
                    security.allow_devices = true;
                    security_key = Some(key);
                }
                _ if OptionKey::is_option(key, value) => options.push((key, value)),
                other => return Err(spec_error(spec, format!("unknown key {other:?}"))),
            }
        }
        let target = target.ok_or_else(|| spec_error(spec, "target= is missing"))?;
        if !target.starts_with('/') {
            return Err(spec_error(spec, "target must be an absolute guest path"));
        }
        // `tag`: the fscache store's name unless `cachetag=` gives one.
        let ninep_options = |opts: &[(&str, Option<&str>)], tag: String| {
            let mut opts = NinepOptions::parse(opts.iter().copied())
                .map_err(|e: OptionError| spec_error(spec, e.to_string()))?;
            opts.read_only |= read_only;
            if let Some(store) = &mut opts.fscache {
                store.tag.get_or_insert(tag);
            }
            Ok::<_, MountError>(opts)
        };
        let path_tag = |kind: &str, path: &str| {
            let full = std::path::absolute(path).unwrap_or_else(|_| path.into());
            format!("{kind}:{}", full.display())
        };
        let no_cache_options = |what: &str| match options.first() {
            Some((key, _)) => Err(spec_error(
                spec,
                format!("{key}= applies to 9p mounts, not {what}"),
            )),
            None => Ok(()),
        };
        let kind = match ty
            .ok_or_else(|| spec_error(spec, "type= is missing (9p, bind, plugin or empty)"))?
        {
            "9p" => {
                match (source, export) {
                    (Some(addr), None) => MountKind::NinepRemote {
                        source: addr.parse().map_err(|e: wasm9p_proto::AddrError| {
                            spec_error(spec, e.to_string())
                        })?,
                        options: ninep_options(&options, format!("{addr} {aname}"))?,
                        aname,
                    },
                    (None, Some(dir)) => {
                        let options = ninep_options(&options, path_tag("export", dir))?;
                        if options.reconnect {
                            return Err(spec_error(
                                spec,
                                "reconnect= applies to mounts of a server (source=), not to an embedded export",
                            ));
                        }
                        // The server decides; the words are this syntax's.
                        if let Err(e) = security.export(dir, options.read_only).check() {
                            return Err(spec_error(
                                spec,
                                match e {
                                    ExportConfigError::DevicesNeedPassthrough => "allow_devices applies to security_model=passthrough (mapped models keep device nodes as regular files)",
                                },
                            ));
                        }
                        MountKind::NinepEmbedded {
                            export: dir.into(),
                            options,
                            security,
                        }
                    }
                    (Some(_), Some(_)) => return Err(spec_error(
                        spec,
                        "give either source= (a server) or export= (a host directory), not both",
                    )),
                    (None, None) => {
                        return Err(spec_error(
                            spec,
                            "a 9p mount needs source=ADDR or export=HOSTDIR",
                        ))
                    }
                }
            }
            "bind" => {
                no_cache_options("bind mounts")?;
                MountKind::Bind {
                    source: source
                        .ok_or_else(|| spec_error(spec, "a bind mount needs source=HOSTDIR"))?
                        .into(),
                }
            }
            "plugin" => {
                let tag = path_tag("plugin", component.unwrap_or_default());
                let options = ninep_options(&options, tag)?;
                if options.reconnect {
                    return Err(spec_error(
                        spec,
                        "reconnect= applies to mounts of a server (source=), not to plugins",
                    ));
                }
                MountKind::Plugin {
                    component: component
                        .ok_or_else(|| {
                            spec_error(spec, "a plugin mount needs component=FILE.wasm")
                        })?
                        .into(),
                    options,
                    limits,
                }
            }
            "empty" => {
                no_cache_options("empty mounts")?;
                if let Some(key) = [
                    ("source", source),
                    ("export", export),
                    ("component", component),
                ]
                .iter()
                .find_map(|(key, value)| value.map(|_| key))
                {
                    return Err(spec_error(
                        spec,
                        format!("{key}= does not apply to an empty mount"),
                    ));
                }
                MountKind::Empty
            }
            other => {
                return Err(spec_error(
                    spec,
                    format!("unknown type {other:?}: expected 9p, bind, plugin or empty"),
                ))
            }
        };
        if let Some(key) = security_key.filter(|_| !matches!(kind, MountKind::NinepEmbedded { .. }))
        {
            return Err(spec_error(
                spec,
                format!("{key} applies to embedded exports (type=9p,export=DIR): a server's own options say it"),
            ));
        }
        if let Some(key) = plugin_key.filter(|_| !matches!(kind, MountKind::Plugin { .. })) {
            return Err(spec_error(spec, format!("{key}= applies to plugin mounts")));
        }
        Ok(MountSpec {
            target: target.to_owned(),
            read_only: read_only || kind == MountKind::Empty,
            kind,
        })
    }

    /// Parses a `--dir HOST::GUEST` (or `HOST`, mounted at the same path).
    pub fn parse_dir(dir: &str) -> Result<MountSpec, MountError> {
        let (host, guest) = dir.split_once("::").unwrap_or((dir, dir));
        if host.is_empty() || !guest.starts_with('/') {
            return Err(spec_error(dir, "expected HOSTDIR::/GUEST/PATH"));
        }
        Ok(MountSpec {
            target: guest.into(),
            kind: MountKind::Bind {
                source: host.into(),
            },
            read_only: false,
        })
    }

    /// Whether the mount keeps a store on the host's disk (`cache=fscache`).
    pub fn persists(&self) -> bool {
        match &self.kind {
            MountKind::NinepRemote { options, .. }
            | MountKind::NinepEmbedded { options, .. }
            | MountKind::Plugin { options, .. } => options.fscache.is_some(),
            MountKind::Bind { .. } | MountKind::Empty => false,
        }
    }

    /// The `type` name printed in stats.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            MountKind::NinepRemote { .. } | MountKind::NinepEmbedded { .. } => "9p",
            MountKind::Bind { .. } => "bind",
            MountKind::Empty => "empty",
            MountKind::Plugin { .. } => "plugin",
        }
    }
}

/// A made mount, kept for its counters.
pub struct Mounted {
    /// The spec it came from.
    pub spec: MountSpec,
    /// The 9p filesystem, for `--stats` (none for bind).
    pub ninep: Option<Arc<NinepFs>>,
    /// The plugin behind a plugin mount, for its tier in `--stats`.
    pub plugin: Option<Arc<PluginFs>>,
}

impl Mounted {
    /// The mount's counters (zeros for a bind mount, which makes no RPCs).
    pub fn stats(&self) -> Option<MountStats> {
        self.ninep.as_ref().map(|fs| fs.stats())
    }

    /// This mount's entry in `--stats`: target, type, RPCs by type, failed walks, cache
    /// hits and reconnects.
    pub fn stats_json(&self) -> serde_json::Value {
        use serde_json::{json, Map};
        let stats = self.stats();
        let mut rpc = Map::new();
        let mut cache = json!({
            "dentry_hits": 0, "dentry_misses": 0, "negative_hits": 0, "symlink_hits": 0,
            "attr_hits": 0, "page_hits": 0, "page_misses": 0, "revalidated": 0,
            "listings_read": 0, "listing_hits": 0, "persistent_hits": 0,
            "persistent_misses": 0, "persistent_bytes": 0, "validations": 0,
            "validated_ahead": 0,
        });
        if let Some(s) = &stats {
            for (name, n) in &s.rpc {
                rpc.insert((*name).to_owned(), json!(n));
            }
            let c = &s.cache;
            cache = json!({
                "dentry_hits": c.dentry_hits, "dentry_misses": c.dentry_misses,
                "negative_hits": c.negative_hits, "symlink_hits": c.symlink_hits,
                "attr_hits": c.attr_hits, "page_hits": c.page_hits, "page_misses": c.page_misses,
                "revalidated": c.revalidated,
                "listings_read": c.listings_read, "listing_hits": c.listing_hits,
                "persistent_hits": c.persistent_hits, "persistent_misses": c.persistent_misses,
                "persistent_bytes": c.persistent_bytes, "validations": c.validations,
                "validated_ahead": c.validated_ahead,
            });
        }
        rpc.insert(
            "total".into(),
            json!(stats.as_ref().map_or(0, |s| s.rpc_total)),
        );
        let failed_walks = stats.as_ref().map_or(0, |s| s.failed_walks);
        let r = stats.as_ref().map(|s| s.reconnect).unwrap_or_default();
        let reconnect = json!({ "reconnects": r.reconnects, "retried": r.retried,
                                "failed": r.failed, "stale_fids": r.stale_fids });
        let (flights, retries) = stats
            .as_ref()
            .map_or((0, 0), |s| (s.flights, s.flight_retries));
        let mut entry = json!({ "target": self.spec.target, "type": self.spec.type_name(),
                "rpc": rpc, "failed_walks": failed_walks, "cache": cache,
                "reconnect": reconnect, "flights": flights,
                "flight_retries": retries });
        if let Some(plugin) = &self.plugin {
            entry["tier"] = plugin.tier_stats();
        }
        entry
    }
}

/// The 9p client and its caches over `stream` to a server that is there for this
/// mount alone (an in-process server's end of a duplex, a worker's socket to its
/// slot): no reconnect; its pages and metadata of fixed contents in `shared` too, when
/// given.
pub async fn attach_over(
    client_end: wasm9p_proto::transport::BoxStream,
    options: &NinepOptions,
    shared: Option<Arc<SharedCache>>,
) -> Result<Arc<NinepFs>, String> {
    let config = ClientConfig {
        msize: options.msize,
        ..ClientConfig::default()
    };
    let session = Session::over(client_end, config)
        .await
        .map_err(|e| e.to_string())?;
    let fs = NinepFs::attach_sharing(&session, "", options, shared)
        .await
        .map_err(|e| format!("attach: {e}"))?;
    Ok(Arc::new(fs))
}

/// Makes every mount and the namespace holding them. Must run inside a tokio runtime
/// (9p sessions and the embedded server run on it). Plugin components are compiled and
/// kept as `plugins` says.
pub async fn build(
    specs: &[MountSpec],
    plugins: &PluginCompile,
) -> Result<(Namespace, Vec<Mounted>), MountError> {
    build_dialing(specs, plugins, &Dialer::default()).await
}

/// As [`build`], reaching servers at an address (`source=`) as `dialer` says.
pub async fn build_dialing(
    specs: &[MountSpec],
    plugins: &PluginCompile,
    dialer: &Dialer,
) -> Result<(Namespace, Vec<Mounted>), MountError> {
    let mut ns = Namespace::new();
    let mut made = Vec::new();
    for spec in specs {
        let fail = |why: String| MountError::Mount {
            target: spec.target.clone(),
            why,
        };
        let mut plugin_fs = None;
        let (backend, ninep): (Arc<dyn wasm9p_guest_fs::backend::Backend>, _) = match &spec.kind {
            MountKind::Bind { source } => {
                let fs =
                    BindFs::open(source).map_err(|e| fail(format!("{}: {e}", source.display())))?;
                (Arc::new(fs), None)
            }
            MountKind::Empty => (Arc::new(MemoryFs::new()), None),
            MountKind::NinepRemote {
                source,
                aname,
                options,
            } => {
                let config = ClientConfig {
                    msize: options.msize,
                    reconnect: options.reconnect,
                    dialer: dialer.clone(),
                    ..ClientConfig::default()
                };
                let session = Session::connect(source, config)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                let fs = NinepFs::attach(&session, aname, options)
                    .await
                    .map_err(|e| fail(format!("attach {aname:?}: {e}")))?;
                let fs = Arc::new(fs);
                (
                    fs.clone() as Arc<dyn wasm9p_guest_fs::backend::Backend>,
                    Some(fs),
                )
            }
            MountKind::NinepEmbedded {
                export,
                options,
                security,
            } => {
                let server = Server::new(ServerConfig {
                    exports: vec![security.export(export, options.read_only)],
                    msize: options.msize,
                    ..Default::default()
                })
                .map_err(|e| fail(e.to_string()))?;
                let (client_end, server_end) = wasm9p_proto::transport::duplex();
                tokio::spawn(async move {
                    server.serve_connection(server_end, "embedded".into()).await
                });
                let fs = attach_over(client_end, options, None).await.map_err(fail)?;
                (
                    fs.clone() as Arc<dyn wasm9p_guest_fs::backend::Backend>,
                    Some(fs),
                )
            }
            MountKind::Plugin {
                component,
                options,
                limits,
            } => {
                let plugin = Arc::new(
                    PluginFs::load(component, *limits, plugins)
                        .map_err(|e| fail(format!("{e:#}")))?,
                );
                plugin_fs = Some(plugin.clone());
                let (client_end, server_end) = wasm9p_proto::transport::duplex();
                tokio::spawn(wasm9p_server::nodes::serve(
                    Arc::new(crate::plugin::PluginNodes(plugin)),
                    server_end,
                ));
                let fs = attach_over(client_end, options, None).await.map_err(fail)?;
                (
                    fs.clone() as Arc<dyn wasm9p_guest_fs::backend::Backend>,
                    Some(fs),
                )
            }
        };
        if let Some(fs) = &ninep {
            // With cache=fscache, the store is confirmed while the guest loads.
            fs.confirm_store_in_background();
        }
        ns.mount(&spec.target, backend, spec.read_only)
            .map_err(|e| fail(format!("{e}")))?;
        made.push(Mounted {
            spec: spec.clone(),
            ninep,
            plugin: plugin_fs,
        });
    }
    Ok((ns, made))
}

/// The `--stats` JSON of the CLI contract.
pub fn stats_json(mounts: &[Mounted], guests: u64, wall_ms: u64) -> serde_json::Value {
    let mounts: Vec<serde_json::Value> = mounts.iter().map(Mounted::stats_json).collect();
    serde_json::json!({ "mounts": mounts, "guests": guests, "wall_ms": wall_ms })
}

/// A host's mounts: the namespace guests see, and what was mounted (for counters).
/// Cheap to share: every guest of a host gets the same namespace, and with it the 9p
/// mounts' caches.
pub struct MountTable {
    ns: Arc<Namespace>,
    mounted: Vec<Mounted>,
}

impl MountTable {
    /// Starts an empty table.
    pub fn builder() -> MountTableBuilder {
        MountTableBuilder::default()
    }

    /// The namespace, for [`crate::p1::WasiP1Ctx::builder`].
    pub fn namespace(&self) -> &Arc<Namespace> {
        &self.ns
    }

    /// Every mount made, in SPEC order.
    pub fn mounted(&self) -> &[Mounted] {
        &self.mounted
    }

    /// The `--stats` JSON for these mounts, `guests` guests and `wall_ms` of wall time.
    pub fn stats_json(&self, guests: u64, wall_ms: u64) -> serde_json::Value {
        stats_json(&self.mounted, guests, wall_ms)
    }
}

impl Drop for MountTable {
    /// The table goes before the runtime its sessions live on: tell them, so that the
    /// teardown that follows is not reported as lost connections.
    fn drop(&mut self) {
        for m in &self.mounted {
            if let Some(fs) = &m.ninep {
                fs.session().close();
            }
        }
    }
}

/// Collects mount SPECs; [`MountTableBuilder::build`] makes them.
#[derive(Debug, Default, Clone)]
pub struct MountTableBuilder {
    specs: Vec<MountSpec>,
    plugins: PluginCompile,
    dialer: Dialer,
}

impl MountTableBuilder {
    /// Adds a `--mount` SPEC (`type=9p,export=DIR,target=/`, ...).
    pub fn mount(mut self, spec: &str) -> Result<Self, MountError> {
        self.specs.push(MountSpec::parse(spec)?);
        Ok(self)
    }

    /// Adds a `--dir` bind (`HOSTDIR::/GUEST`, or `HOSTDIR` at itself).
    pub fn dir(mut self, dir: &str) -> Result<Self, MountError> {
        self.specs.push(MountSpec::parse_dir(dir)?);
        Ok(self)
    }

    /// Adds an already parsed SPEC.
    pub fn spec(mut self, spec: MountSpec) -> Self {
        self.specs.push(spec);
        self
    }

    /// Where plugin mounts keep their components' compiled code, so that the next
    /// process mounting the same plugin maps it instead of compiling it again (default:
    /// not kept).
    pub fn module_cache(mut self, cache: ModuleCache) -> Self {
        self.plugins.cache = cache;
        self
    }

    /// The compiler tier plugin components run on (default auto: a plugin of 4 MiB or
    /// more whose optimized code is not cached starts on the baseline tier, and stays
    /// on it for the life of its mount), and where their optimized compile is done
    /// then (default: a thread of this process; the `wasm9p` CLI starts a detached
    /// `wasm9p compile`).
    pub fn plugin_tier(mut self, tier: TierChoice, upgrade_in: UpgradeIn) -> Self {
        self.plugins.tier = tier;
        self.plugins.upgrade_in = upgrade_in;
        self
    }

    /// How 9p servers at an address (`source=`) are reached (default: the address's
    /// own transport); a reconnect dials the same way.
    pub fn dialer(mut self, dialer: Dialer) -> Self {
        self.dialer = dialer;
        self
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Makes every mount (connecting to 9p servers, starting embedded ones). Must run
    /// inside the tokio runtime that guests' contexts will be given: the sessions and
    /// embedded servers live on it.
    pub async fn build(self) -> Result<MountTable, MountError> {
        let (ns, mounted) = build_dialing(&self.specs, &self.plugins, &self.dialer).await?;
        Ok(MountTable {
            ns: Arc::new(ns),
            mounted,
        })
    }
}
