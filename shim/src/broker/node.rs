//! The broker's node side: a thread of the shim process answering its containers
//! (see the module docs of `broker`), each request on a thread of its own so that a
//! slow connect holds up no other container.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oci_spec::runtime::Spec;

use wasm9p_host::engine::guest_engines;
use wasm9p_host::http::{HandlerKind, HttpLimits};
use wasm9p_host::module_cache::{ModuleCache, Tier};

use super::{receive, send, CodeTier, CompileFor, Described, Reply, Request};
use crate::bundle::Bundle;
use crate::config::ShimConfig;

/// How long a connect to a node-side server may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Starts the thread serving `node_end`.
pub(super) fn spawn(node_end: OwnedFd, config: Result<ShimConfig, String>) {
    let config = Arc::new(config);
    let started = std::thread::Builder::new()
        .name("wasm9p-broker".into())
        .spawn(move || serve(node_end, config));
    if let Err(e) = started {
        log::error!("wasm9p broker: cannot start its thread: {e}");
    }
}

fn serve(node_end: OwnedFd, config: Arc<Result<ShimConfig, String>>) {
    loop {
        let received = match receive::<Request>(node_end.as_fd()) {
            Ok(Some(received)) => received,
            Ok(None) => return,
            Err(why) => {
                log::warn!(
                    "wasm9p broker: {}",
                    why.unwrap_or_else(|| "timed out".into())
                );
                continue;
            }
        };
        let mut fds = received.fds.into_iter();
        let Some(reply_to) = fds.next() else {
            log::warn!("wasm9p broker: a request without a socket to reply on");
            continue;
        };
        let handed = fds.next();
        let config = Arc::clone(&config);
        let (request, pid) = (received.message, received.pid);
        let spawned = std::thread::Builder::new()
            .name("wasm9p-broker-request".into())
            .spawn(move || {
                let (reply, fds) = match answer(&config, request, pid, handed) {
                    Ok(answered) => answered,
                    Err(why) => (Reply::Refused(why), Vec::new()),
                };
                let borrowed: Vec<_> = fds.iter().map(AsFd::as_fd).collect();
                if let Err(why) = send(reply_to.as_fd(), &reply, &borrowed) {
                    log::warn!("wasm9p broker: cannot reply: {why}");
                }
            });
        if let Err(e) = spawned {
            log::warn!("wasm9p broker: cannot start a request's thread: {e}");
        }
    }
}

/// The reply to `request` from the process `pid`, and the descriptors that go with it.
fn answer(
    config: &Result<ShimConfig, String>,
    request: Request,
    pid: Option<i32>,
    handed: Option<OwnedFd>,
) -> Result<(Reply, Vec<OwnedFd>), String> {
    let config = config.as_ref().map_err(Clone::clone)?;
    let pid = pid.ok_or("the request came without its sender's credentials")?;
    let here = std::env::current_dir().map_err(|e| format!("the shim's bundle: {e}"))?;
    let dir = bundle_of(pid, here.parent().unwrap_or(&here))?;
    let spec = Spec::load(dir.join("config.json"))
        .map_err(|e| format!("{}: {e}", dir.join("config.json").display()))?;
    let bundle = Bundle::of(&spec, config)?;
    match request {
        Request::Describe => {
            let keeps_code = match config.module_cache_dir() {
                Some(cache) => match make_cache_dir(cache) {
                    Ok(()) => true,
                    // The task runs anyway, compiling what it would have found.
                    Err(e) => {
                        log::warn!(
                            "wasm9p: module cache {}: {e}; tasks compile without it",
                            cache.display()
                        );
                        false
                    }
                },
                None => false,
            };
            let described = Described {
                bundle,
                root_options: config.root_options.clone(),
                volume_options: config.volume_options.clone(),
                keeps_code,
                tier_from: config.tier_from,
                http_reuse: config.http_reuse,
                http_reuse_idle_ms: config.http_reuse_idle_ms,
            };
            Ok((Reply::Described(described), Vec::new()))
        }
        Request::Artifact { key } => {
            let cache = config
                .module_cache_dir()
                .ok_or("the node keeps no module cache")?;
            match open_artifact(cache, &key)? {
                Some(file) => Ok((Reply::Artifact, vec![file])),
                None => Ok((Reply::NotKept, Vec::new())),
            }
        }
        Request::Dial { source } => {
            if !bundle.names_source(&source) {
                return Err(format!(
                    "{source}: not a source the container's annotation {} names",
                    crate::bundle::ANNOTATION
                ));
            }
            let addr: wasm9p_proto::Addr = source.parse().map_err(|e| format!("{e}"))?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start a runtime: {e}"))?;
            let connected = runtime
                .block_on(wasm9p_proto::transport::connect_fd(&addr, DIAL_TIMEOUT))
                .map_err(|e| format!("cannot connect to {source}: {e}"))?;
            Ok((Reply::Dialed, vec![connected.into_fd()]))
        }
        Request::Compile { engines, wait_for } => {
            let program = handed.ok_or("a compile request without its program")?;
            let cache = config
                .module_cache_dir()
                .ok_or("the node keeps no module cache")?;
            let cache = ModuleCache::at(cache).with_limit(config.module_cache_bytes);
            let Some(tier) = wait_for else {
                compile_later(cache, engines, program, config.tier_from)?;
                return Ok((Reply::Compiling, Vec::new()));
            };
            let built = engines_for(engines)?;
            let path = program_path(&program);
            cache
                .compile_stored(built.get(tier.tier()), &path, false, &|_| {})
                .map_err(|e| e.to_string())?;
            if tier == CodeTier::Baseline {
                // The container starts on it; the optimized code follows.
                compile_later(cache, engines, program, config.tier_from)?;
            }
            Ok((Reply::Compiled, Vec::new()))
        }
    }
}

/// Compiles still going on the node's side, which the shim process waits for before
/// it ends ([`finish_compiles`]).
static COMPILES: Mutex<Vec<std::thread::JoinHandle<()>>> = Mutex::new(Vec::new());

/// Starts the compile of `program` for `engines` into `cache`, on a thread at a low
/// priority: its baseline code first when it is big enough to start there (`tier_from`
/// and up: quick, so that the next container need not compile it), then its
/// optimized code. What is kept already is not compiled again.
fn compile_later(
    cache: ModuleCache,
    engines: CompileFor,
    program: OwnedFd,
    tier_from: u64,
) -> Result<(), String> {
    let engines = engines_for(engines)?;
    let thread = std::thread::Builder::new()
        .name("wasm9p-compile".into())
        .spawn(move || {
            let path = program_path(&program);
            let big = std::fs::metadata(&path).is_ok_and(|m| m.len() >= tier_from);
            if big {
                if let Err(e) =
                    cache.compile_stored(engines.get(Tier::Baseline), &path, true, &|_| {})
                {
                    log::info!("wasm9p: a task's baseline code not kept: {e}");
                }
            }
            let started = std::time::Instant::now();
            match cache.compile_stored(engines.get(Tier::Optimized), &path, true, &|_| {}) {
                Ok(Some(_)) => log::info!(
                    "wasm9p: a task's optimized code compiled and kept on the node in {:.1?}",
                    started.elapsed()
                ),
                Ok(None) => {}
                Err(e) => log::warn!("wasm9p: a task's optimized compile failed: {e}"),
            }
            drop(program);
        })
        .map_err(|e| format!("cannot start a compile: {e}"))?;
    COMPILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(thread);
    Ok(())
}

/// The engines of a compile request.
fn engines_for(engines: CompileFor) -> Result<wasm9p_host::module_cache::Engines, String> {
    let made = match engines {
        CompileFor::Guest { interruptible } => guest_engines(interruptible),
        CompileFor::Http {
            memory,
            max_instances,
            service,
        } => wasm9p_host::http::engines(
            &HttpLimits {
                memory,
                max_instances,
                ..HttpLimits::default()
            },
            match service {
                true => HandlerKind::Service,
                false => HandlerKind::Proxy,
            },
        ),
    };
    made.map_err(|e| e.to_string())
}

/// The path a program handed over is read at.
fn program_path(program: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", program.as_raw_fd()))
}

/// Waits, at most `limit`, for the compiles containers handed over: the shim process
/// calls it once containerd has shut it down.
pub fn finish_compiles(limit: Duration) {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let pending: Vec<_> =
            std::mem::take(&mut *COMPILES.lock().unwrap_or_else(|e| e.into_inner()));
        if pending.is_empty() {
            return;
        }
        for thread in pending {
            while !thread.is_finished() {
                if std::time::Instant::now() >= deadline {
                    log::warn!("wasm9p: leaving a compile unfinished after {limit:?}");
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = thread.join();
        }
    }
}

/// The module cache's directory, made private if it is not there.
fn make_cache_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// The artifact kept under `key` in the cache `dir`, opened read-only and marked used
/// (the cache evicts the least recently used); `None` if there is none. A key that is
/// not 64 hex digits is refused: it could name another file.
fn open_artifact(dir: &Path, key: &str) -> Result<Option<OwnedFd>, String> {
    if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{key:?} is not an artifact's key"));
    }
    let path = dir.join(format!("{key}.cwasm"));
    let opened = rustix::fs::open(
        &path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NOFOLLOW,
        rustix::fs::Mode::empty(),
    );
    match opened {
        Ok(fd) => {
            // As the cache's own hits do: the mtime is its last use.
            let _ = rustix::fs::utimensat(
                rustix::fs::CWD,
                &path,
                &rustix::fs::Timestamps {
                    last_access: rustix::fs::Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_NOW,
                    },
                    last_modification: rustix::fs::Timespec {
                        tv_sec: 0,
                        tv_nsec: rustix::fs::UTIME_NOW,
                    },
                },
                rustix::fs::AtFlags::empty(),
            );
            Ok(Some(fd))
        }
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The bundle of the container whose process `pid` is: the one among the bundles in
/// `tasks` (containerd keeps a namespace's bundles in one directory, and starts a shim
/// in the bundle it is for: the caller passes its working directory's parent) whose
/// rootfs is that process's root.
fn bundle_of(pid: i32, tasks: &Path) -> Result<PathBuf, String> {
    let root = std::fs::metadata(format!("/proc/{pid}/root"))
        .map_err(|e| format!("cannot see the root of process {pid}: {e}"))?;
    let identity = (root.dev(), root.ino());
    let same = |path: &Path| std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == identity);
    let bundles: Vec<PathBuf> = std::fs::read_dir(tasks)
        .map_err(|e| format!("{}: {e}", tasks.display()))?
        .flatten()
        .map(|entry| entry.path())
        .collect();
    // containerd mounts a rootfs at BUNDLE/rootfs; `ctr run --rootfs DIR` names DIR in
    // the spec instead.
    if let Some(found) = bundles.iter().find(|dir| same(&dir.join("rootfs"))) {
        return Ok(found.clone());
    }
    bundles
        .into_iter()
        .find(|dir| spec_root(dir).is_some_and(|root| same(&root)))
        .ok_or_else(|| format!("no container of this shim has the root of process {pid}"))
}

/// The rootfs the bundle at `dir`'s spec names.
fn spec_root(dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read(dir.join("config.json")).ok()?;
    let spec: serde_json::Value = serde_json::from_slice(&text).ok()?;
    let root = Path::new(spec["root"]["path"].as_str()?);
    Some(if root.is_absolute() {
        root.to_owned()
    } else {
        dir.join(root)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_known_by_its_root_among_the_bundles() {
        let tasks = tempfile::tempdir().unwrap();
        let me = std::process::id() as i32;
        // Another container's bundle, its rootfs a directory of its own.
        let other = tasks.path().join("other");
        std::fs::create_dir_all(other.join("rootfs")).unwrap();
        std::fs::write(other.join("config.json"), r#"{"root":{"path":"rootfs"}}"#).unwrap();
        assert!(bundle_of(me, tasks.path())
            .unwrap_err()
            .contains("no container"));
        // A bundle whose spec names this process's root (`ctr run --rootfs /`).
        let mine = tasks.path().join("mine");
        std::fs::create_dir_all(&mine).unwrap();
        std::fs::write(mine.join("config.json"), r#"{"root":{"path":"/"}}"#).unwrap();
        assert_eq!(bundle_of(me, tasks.path()).unwrap(), mine);
        assert!(bundle_of(i32::MAX, tasks.path()).is_err());
    }

    #[test]
    fn an_artifact_is_given_read_only_by_its_key_and_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let key = "ab".repeat(32);
        assert!(open_artifact(dir.path(), &key).unwrap().is_none());
        std::fs::write(dir.path().join(format!("{key}.cwasm")), b"code").unwrap();
        std::fs::write(dir.path().join("secret.cwasm"), b"not an artifact").unwrap();
        let fd = open_artifact(dir.path(), &key).unwrap().unwrap();
        let flags = rustix::fs::fcntl_getfl(&fd).unwrap();
        assert_eq!(
            flags & rustix::fs::OFlags::RWMODE,
            rustix::fs::OFlags::RDONLY
        );
        assert_eq!(
            std::fs::read(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap(),
            b"code"
        );
        for bad in [
            "secret",
            "../etc/passwd",
            &"g".repeat(64),
            &"ab".repeat(33),
            "",
        ] {
            let err = open_artifact(dir.path(), bad).unwrap_err();
            assert!(err.contains("is not an artifact's key"), "{bad}: {err}");
        }
    }
}
