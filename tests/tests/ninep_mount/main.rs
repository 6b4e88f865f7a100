//! A 9p mount (`NinepFs` in a `Namespace`) against our server over loopback: the
//! v9fs-style caches answer repeated lookups without RPCs, local changes drop what they
//! make stale, negative entries expire, and concurrent misses share one walk.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::backend::{Backend, OpenFile, OpenFlags, SetAttr};
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::Errno;
use wasm9p_tests::{TestServer, Tree};

mod coherence;
mod complete;
mod files;
mod fscache;
mod late_replies;
mod metadata;
mod pages;

fn tree() -> tempfile::TempDir {
    Tree::build(&[
        Tree::Dir(
            "usr",
            vec![Tree::Dir(
                "include",
                vec![Tree::file("stdio.h", "int printf();\n")],
            )],
        ),
        Tree::file("a", "content of a"),
        Tree::file("b", "content of b"),
        Tree::Symlink("link", "a"),
    ])
}

fn options(spec: &str) -> NinepOptions {
    NinepOptions::parse(spec.split(',').filter(|s| !s.is_empty()).map(
        |kv| match kv.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (kv, None),
        },
    ))
    .unwrap()
}

/// A server a mount can attach to: ours in this process, or diod (see `coherence`).
trait Serving {
    fn addr(&self) -> wasm9p_proto::Addr;
    fn aname(&self) -> String;
}

impl Serving for TestServer {
    fn addr(&self) -> wasm9p_proto::Addr {
        self.addr.clone()
    }
    fn aname(&self) -> String {
        String::new()
    }
}

async fn mount(server: &impl Serving, spec: &str) -> (Namespace, Arc<NinepFs>) {
    let opts = options(spec);
    let session = Session::connect(
        &server.addr(),
        ClientConfig {
            msize: opts.msize,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let fs = Arc::new(
        NinepFs::attach(&session, &server.aname(), &opts)
            .await
            .unwrap(),
    );
    let mut ns = Namespace::new();
    ns.mount("/", fs.clone(), opts.read_only).unwrap();
    (ns, fs)
}

/// The names `path` lists, sorted.
async fn sorted_names(ns: &Namespace, path: &str) -> Vec<String> {
    let mut names: Vec<String> = ns
        .readdir(path)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    names
}

fn rpcs(fs: &NinepFs, name: &str) -> u64 {
    fs.session()
        .counts()
        .snapshot()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, c)| c)
        .unwrap_or(0)
}

async fn open(ns: &Namespace, fs: &NinepFs, path: &str, flags: OpenFlags) -> Box<dyn OpenFile> {
    let file = ns.resolve(path, true).await.unwrap();
    fs.open(&file.node, flags).await.unwrap()
}

const WRITE: OpenFlags = OpenFlags {
    read: false,
    write: true,
    truncate: true,
    append: false,
};
const READ: OpenFlags = OpenFlags {
    read: true,
    write: false,
    truncate: false,
    append: false,
};
