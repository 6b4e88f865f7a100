//! Path lookups through a guest-fs namespace, as a compiler does them: `stat` of a
//! header that exists and of one that does not, on a bind mount (host system calls, the
//! baseline) and on 9p mounts of our server with `cache=none` and `cache=loose`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasm9p_guest_fs::backend::bind::BindFs;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::Addr;

/// Lookups per second for one mount.
pub struct LookupRow {
    pub mount: String,
    pub missing: f64,
    pub present: f64,
}

async fn rate(ns: &Namespace, path: &str, duration: Duration) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        for _ in 0..64 {
            let _ = ns.getattr(path, true).await;
        }
        n += 64;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn measure(name: String, ns: Namespace, duration: Duration) -> LookupRow {
    let missing = "/dir05/missing.h";
    let present = "/dir05/file03.h";
    assert!(ns.getattr(missing, true).await.is_err() && ns.getattr(present, true).await.is_ok());
    LookupRow {
        mount: name,
        missing: rate(&ns, missing, duration).await,
        present: rate(&ns, present, duration).await,
    }
}

/// Measures bind, 9p none and 9p loose on the same tree.
pub async fn run(
    tree: &std::path::Path,
    server: &Addr,
    aname: &str,
    duration: Duration,
) -> Vec<LookupRow> {
    let mut rows = Vec::new();
    let mut bind = Namespace::new();
    bind.mount("/", Arc::new(BindFs::open(tree).unwrap()), false)
        .unwrap();
    rows.push(measure("bind (host syscalls)".into(), bind, duration).await);
    for mode in ["none", "loose"] {
        let options = NinepOptions::parse([("cache", Some(mode))]).unwrap();
        let session = Session::connect(server, ClientConfig::default())
            .await
            .unwrap();
        let mut ns = Namespace::new();
        ns.mount(
            "/",
            Arc::new(NinepFs::attach(&session, aname, &options).await.unwrap()),
            false,
        )
        .unwrap();
        rows.push(measure(format!("9p cache={mode}"), ns, duration).await);
    }
    rows
}
