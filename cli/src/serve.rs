//! `wasm9p serve`: a host directory (or several) exported over 9P2000.L on every
//! listener asked for, with access rules (reloaded on SIGHUP), per-peer bounds, rate
//! caps and a security model, until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use wasm9p_proto::consts::{DEFAULT_MSIZE, MAX_MSIZE, MIN_MSIZE};
use wasm9p_proto::transport::Listener;
use wasm9p_proto::Addr;
use wasm9p_server::{
    AccessRule, ExportConfig, ExportConfigError, PeerLimits, RateCap, SecurityModel, Server,
    ServerConfig,
};

use crate::shared::{fail, say, Shutdown, EXIT_USAGE};

/// `wasm9p serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Host directory to export (repeatable; a client picks one by aname: its path or
    /// its last component; an empty aname means the only export). `DIR,ro`: this one
    /// read-only.
    #[arg(long = "export", value_name = "DIR[,ro]", required = true, value_parser = parse_export)]
    pub exports: Vec<(PathBuf, bool)>,
    /// Who may attach an export (repeatable): EXPORT (its name or path) =
    /// PEER[,PEER]..., where PEER is cid:N (vsock), uid:N or gid:N (Unix socket
    /// credentials), listen:ADDR (arrived on that listener) or ip:ADDR[/BITS] (tcp).
    /// Without any, every peer may attach every export; with some, an export no rule
    /// names is attachable by nobody.
    #[arg(long = "allow", value_name = "EXPORT=PEER[,PEER]...", value_parser = parse_allow)]
    pub allow: Vec<AccessRule>,
    /// More rules, one EXPORT=PEER[,PEER]... per line (`#` starts a comment), read
    /// again on SIGHUP: connections stay, and lose only what the new rules take away.
    #[arg(long, value_name = "FILE")]
    pub allow_file: Option<PathBuf>,
    /// Cap the bytes read and written through an export, by all its clients together,
    /// to BYTES a second (`K`, `M`, `G`: binary). Repeatable, one per export.
    #[arg(long = "rate", value_name = "EXPORT=BYTES", value_parser = parse_rate)]
    pub rates: Vec<RateCap>,
    /// With rules: connections one peer (an address, a uid and gid, a CID, on one
    /// listener) may have open at once.
    #[arg(long, value_name = "N", default_value_t = PeerLimits::default().connections as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_peer: u32,
    /// With rules: fids one peer may hold at once over all its connections.
    #[arg(long, value_name = "N", default_value_t = PeerLimits::default().fids as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_fids_per_peer: u32,
    /// With rules: requests one peer may have in flight at once over all its
    /// connections (the others wait to be read).
    #[arg(long, value_name = "N", default_value_t = PeerLimits::default().requests as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_requests_per_peer: u32,
    /// With rules: most tenants served on threads of their own at once; connections of
    /// tenants beyond them share the server's other threads.
    #[arg(long, value_name = "N", default_value_t = wasm9p_server::DEFAULT_MAX_TENANT_THREADS as u32, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tenant_threads: u32,
    /// Where to listen: tcp:HOST:PORT, unix:PATH, vsock:CID:PORT (vsock:any:PORT),
    /// fc-vsock:UDS_PATH:PORT. Repeatable.
    #[arg(long = "listen", value_name = "ADDR", required = true, value_parser = parse_addr)]
    pub listen: Vec<Addr>,
    /// Refuse every change with EROFS.
    #[arg(long)]
    pub read_only: bool,
    /// How owners, modes and special files are kept: passthrough (made for real, with
    /// the server's credentials), mapped-xattr (regular files and directories owned by
    /// the server, what the client asked for in user.virtfs.* xattrs, as QEMU keeps
    /// them: device nodes, FIFOs, chown and chmod work for a guest that is root while
    /// the server is not) or mapped-file (the same, kept in hidden .virtfs_metadata
    /// files, for host file systems without user xattrs).
    #[arg(long, value_name = "MODEL", default_value_t = SecurityModel::Passthrough)]
    pub security_model: SecurityModel,
    /// In passthrough, make the device nodes clients ask for (the server needs
    /// CAP_MKNOD; it never opens them, but the host's users may: trusted clients only).
    /// Without it, mknod of a device is EPERM.
    #[arg(long)]
    pub allow_devices: bool,
    /// Largest message size granted, in bytes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MSIZE, value_parser = parse_msize)]
    pub msize: u32,
}

fn parse_export(s: &str) -> Result<(PathBuf, bool), String> {
    match s.strip_suffix(",ro") {
        Some(dir) if !dir.is_empty() => Ok((dir.into(), true)),
        _ if s.is_empty() => Err("an empty directory".into()),
        _ => Ok((s.into(), false)),
    }
}

fn parse_rate(s: &str) -> Result<RateCap, String> {
    let (export, bytes) = s
        .split_once('=')
        .filter(|(export, _)| !export.is_empty())
        .ok_or_else(|| format!("{s:?}: expected EXPORT=BYTES"))?;
    let bytes_per_second = wasm9p_guest_fs::mount_options::parse_bytes(bytes)
        .filter(|n| *n > 0)
        .ok_or_else(|| {
            format!("{bytes:?}: expected bytes a second (a number, or with K, M or G)")
        })?;
    Ok(RateCap {
        export: export.into(),
        bytes_per_second,
    })
}

fn parse_allow(s: &str) -> Result<AccessRule, String> {
    s.parse()
        .map_err(|e: wasm9p_server::access::RuleError| e.to_string())
}

/// The rules in an `--allow-file`.
fn read_rules(file: &std::path::Path) -> Result<Vec<AccessRule>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    text.lines()
        .enumerate()
        .map(|(i, line)| (i, line.split('#').next().unwrap_or("").trim()))
        .filter(|(_, line)| !line.is_empty())
        .map(|(i, line)| {
            parse_allow(line).map_err(|e| format!("{} line {}: {e}", file.display(), i + 1))
        })
        .collect()
}

/// Every rule: `--allow`'s (`given`) and the `--allow-file`'s, read now.
fn all_rules(
    given: &[AccessRule],
    file: Option<&std::path::Path>,
) -> Result<Vec<AccessRule>, String> {
    let mut rules = given.to_vec();
    if let Some(file) = file {
        rules.extend(read_rules(file)?);
    }
    Ok(rules)
}

fn parse_addr(s: &str) -> Result<Addr, String> {
    s.parse()
        .map_err(|e: wasm9p_proto::AddrError| e.to_string())
}

fn parse_msize(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes"))?;
    if !(MIN_MSIZE..=MAX_MSIZE).contains(&n) {
        return Err(format!("msize must be between {MIN_MSIZE} and {MAX_MSIZE}"));
    }
    Ok(n)
}

/// Runs `wasm9p serve` until SIGINT or SIGTERM.
pub async fn serve(args: ServeArgs) -> ExitCode {
    let exports = args
        .exports
        .iter()
        .map(|(p, ro)| ExportConfig {
            read_only: args.read_only || *ro,
            security_model: args.security_model,
            allow_devices: args.allow_devices,
            ..ExportConfig::new(p)
        })
        .collect();
    let exports: Vec<ExportConfig> = exports;
    if let Some(e) = exports.iter().find_map(|e| e.check().err()) {
        return fail(
            EXIT_USAGE,
            match e {
                ExportConfigError::DevicesNeedPassthrough => {
                    "--allow-devices applies to --security-model passthrough (mapped models keep device nodes as regular files)"
                }
            },
        );
    }
    let rules = match all_rules(&args.allow, args.allow_file.as_deref()) {
        Ok(rules) => rules,
        Err(e) => return fail(EXIT_USAGE, &format!("cannot read the rules: {e}")),
    };
    let server = match Server::new(ServerConfig {
        exports,
        msize: args.msize,
        access: rules,
        peer_limits: PeerLimits {
            connections: args.max_connections_per_peer as usize,
            fids: args.max_fids_per_peer as usize,
            requests: args.max_requests_per_peer as usize,
        },
        rates: args.rates.clone(),
        max_tenant_threads: args.max_tenant_threads as usize,
    }) {
        Ok(server) => server,
        Err(e) => return fail(EXIT_USAGE, &format!("cannot export: {e}")),
    };
    let mut listeners = Vec::new();
    for addr in &args.listen {
        match Listener::bind(addr).await {
            Ok(l) => listeners.push(l),
            Err(e) => return fail(EXIT_USAGE, &format!("cannot listen on {addr}: {e}")),
        }
    }
    // Before anything says "serving": a signal from then on must stop us cleanly.
    let shutdown = match Shutdown::register() {
        Ok(shutdown) => shutdown,
        Err(e) => return fail(1, &format!("cannot handle signals: {e}")),
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    let exports: Vec<_> = server
        .exports()
        .iter()
        .map(|e| e.path.display().to_string())
        .collect();
    for listener in listeners {
        // Scripts wait for this line to know the server is up.
        say(&format!(
            "serving {} on {}",
            exports.join(", "),
            listener.local_addr()
        ));
        let server = server.clone();
        let mut stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            server
                .serve(listener, async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await
        }));
    }
    let reload = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hup) => tokio::spawn(reload_on_hup(
            hup,
            server.clone(),
            args.allow.clone(),
            args.allow_file.clone(),
        )),
        Err(e) => return fail(1, &format!("cannot handle SIGHUP: {e}")),
    };
    // After the "serving" lines, which scripts wait for first.
    let open_tcp = args.listen.iter().find(|a| match a {
        Addr::Tcp { host, .. } => {
            host != "localhost"
                && !host
                    .trim_matches(|c| c == '[' || c == ']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    });
    if let (false, Some(addr)) = (server.has_access_rules(), open_tcp) {
        say(&format!(
            "warning: {addr} is reachable from other machines and no --allow rule limits who may attach what"
        ));
    }
    shutdown.wait().await;
    let _ = stop_tx.send(true);
    reload.abort();
    for task in tasks {
        let _ = task.await;
    }
    say("stopped");
    ExitCode::SUCCESS
}

/// Reads the rules again at each SIGHUP; rules that do not read or name no export are
/// said and the old ones kept.
async fn reload_on_hup(
    mut hup: tokio::signal::unix::Signal,
    server: Server,
    given: Vec<AccessRule>,
    file: Option<PathBuf>,
) {
    while hup.recv().await.is_some() {
        let result = all_rules(&given, file.as_deref()).and_then(|rules| {
            let n = rules.len();
            server.set_rules(&rules).map_err(|e| e.to_string())?;
            Ok(n)
        });
        match result {
            Ok(n) => say(&format!("SIGHUP: {n} access rules in force")),
            Err(e) => say(&format!("SIGHUP: rules kept as they were: {e}")),
        }
    }
}
