//! An action's input root (with its writable layer) served over a real transport to a
//! guest host in another process, as a worker whose guests run in a VM would: a
//! `wasm9p run` mounts it from a Unix socket, and from a Firecracker-style hybrid
//! vsock socket (`CONNECT <port>`), reads an input and writes an output that the
//! layer then holds.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use prost::Message;
use wasm9p_remote::apis::v2;
use wasm9p_remote::layer::{ActionFs, Inspected};
use wasm9p_remote::store::{ContentStore, Fetch, FetchError};
use wasm9p_remote::tree::InputTree;
use wasm9p_remote::{BoxFuture, Digest};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// Blobs in memory, as the CAS would hand them.
#[derive(Default)]
struct Blobs(Mutex<HashMap<Digest, Vec<u8>>>);

impl Fetch for Blobs {
    fn fetch(&self, digest: Digest) -> BoxFuture<'_, Result<Vec<u8>, FetchError>> {
        let found = self.0.lock().unwrap().get(&digest).cloned();
        Box::pin(async move { found.ok_or(FetchError::Missing(digest)) })
    }
}

/// An input root of one file, `data/in.txt`.
fn action_fs(scratch: &Path) -> Arc<ActionFs> {
    let blobs = Arc::new(Blobs::default());
    let text = b"served over a socket\n".to_vec();
    let file = Digest::of(&text);
    blobs.0.lock().unwrap().insert(file, text);
    let data = v2::Directory {
        files: vec![v2::FileNode {
            name: "in.txt".into(),
            digest: Some(file.to_proto()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let data_digest = Digest::of(&data.encode_to_vec());
    let root = v2::Directory {
        directories: vec![v2::DirectoryNode {
            name: "data".into(),
            digest: Some(data_digest.to_proto()),
        }],
        ..Default::default()
    };
    let root_digest = Digest::of(&root.encode_to_vec());
    let dirs = HashMap::from([(data_digest, data), (root_digest, root)]);
    let tree = Arc::new(InputTree::build(root_digest, &dirs).unwrap());
    let store = Arc::new(ContentStore::open(&scratch.join("store"), 1 << 20).unwrap());
    Arc::new(ActionFs::new(tree, store, blobs, scratch.join("layer"), 1 << 20).unwrap())
}

#[test]
fn the_input_root_serves_a_guest_host_over_a_unix_socket_and_hybrid_vsock() {
    let guest = wasm9p_tests::compile_c_guest(&wasm9p_tests::guest_source("farm_action.c"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for kind in ["unix", "fc-vsock"] {
        let dir = tempfile::tempdir().unwrap();
        let fs = action_fs(dir.path());
        let sock = dir.path().join("root.sock");
        let (listen, source) = match kind {
            "unix" => (
                format!("unix:{}", sock.display()),
                format!("unix:{}", sock.display()),
            ),
            _ => (
                format!("fc-vsock:{}:564", sock.display()),
                format!("fc-vsock:{}:564", sock.display()),
            ),
        };
        let listener = runtime
            .block_on(wasm9p_proto::transport::Listener::bind(
                &listen.parse().unwrap(),
            ))
            .unwrap();
        if kind == "fc-vsock" {
            // The VMM's side: connections to the base socket are handed over after
            // `CONNECT 564`; here a relay plays the VMM (as the vsock tests do).
            spawn_hybrid_vsock_vmm(&runtime, &sock, 564);
        }
        runtime.spawn(wasm9p_server::nodes::serve_on(fs.clone(), listener));
        let mount = format!("type=9p,source={source},target=/,cache=loose");
        for args in [
            vec!["read", "/data/in.txt"],
            vec!["write", "/out/made.txt", "made by the guest"],
        ] {
            let out = std::process::Command::new(BIN)
                .args(["run", "--mount", &mount])
                .arg(&guest)
                .args(&args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{kind}: {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if args[0] == "read" {
                assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    "served over a socket\n",
                    "{kind}"
                );
            }
        }
        // What the guest wrote is the layer's, as a worker collects outputs.
        let node = fs.resolve("out/made.txt").unwrap();
        match fs.inspect(node).unwrap() {
            Inspected::MadeFile { size, .. } => assert_eq!(size, 17, "{kind}"),
            other => panic!("{kind}: {other:?}"),
        }
        assert_eq!(fs.stats().files_read, 1, "{kind}");
    }
}

/// A stand-in for Firecracker's hybrid vsock: a Unix socket at `base` that reads
/// `CONNECT <port>\n`, answers `OK 1\n` and relays to the listener at `base_<port>`.
fn spawn_hybrid_vsock_vmm(runtime: &tokio::runtime::Runtime, base: &Path, port: u32) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = {
        let _in = runtime.enter();
        tokio::net::UnixListener::bind(base).unwrap()
    };
    let target = wasm9p_proto::Addr::fc_vsock_listen_path(base, port);
    runtime.spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let mut client = BufReader::new(client);
                let mut line = String::new();
                if client.read_line(&mut line).await.is_err() || !line.starts_with("CONNECT ") {
                    return;
                }
                let Ok(mut server) = tokio::net::UnixStream::connect(&target).await else {
                    return;
                };
                let mut client = client.into_inner();
                if client.write_all(b"OK 1\n").await.is_err() {
                    return;
                }
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
}
