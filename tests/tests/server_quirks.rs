//! What other production 9P2000.L servers do within the spec (or as Linux tolerates
//! it), each as a quirk of a proxy between a mount and our server, in every cache mode:
//! errors sent as Rerror (type 107) instead of Rlerror, and reads answered with fewer
//! bytes than asked before the end of the file. (Replies out of order are the fault
//! proxy's `Reorder`, exercised in `faults.rs`; walks answered with fewer qids than
//! names are how our own server and diod answer a missing name, everywhere.)

use std::sync::Arc;

use bytes::Bytes;
use wasm9p_guest_fs::backend::ninep::NinepFs;
use wasm9p_guest_fs::backend::OpenFlags;
use wasm9p_guest_fs::client::{ClientConfig, Session};
use wasm9p_guest_fs::mount_options::NinepOptions;
use wasm9p_guest_fs::namespace::Namespace;
use wasm9p_proto::Errno;
use wasm9p_tests::fault_proxy::{Direction, Fault, FaultProxy, Schedule};
use wasm9p_tests::{TestServer, Tree};

const MODES: [&str; 3] = ["none", "mmap", "loose"];

/// A namespace with `/` mounted over a proxy applying `quirk` to every reply.
async fn mount_through(server: &TestServer, quirk: Fault, cache: &str) -> (Namespace, FaultProxy) {
    let proxy = FaultProxy::start(
        &server.addr,
        Schedule {
            seed: 1,
            fault: quirk,
            direction: Direction::Replies,
            every: 1,
            spare: 0,
        },
    )
    .await;
    let config = ClientConfig {
        msize: 65536,
        ..ClientConfig::default()
    };
    let session = Session::connect(&proxy.addr, config).await.unwrap();
    let opts = NinepOptions::parse([("cache", Some(cache))]).unwrap();
    let fs = NinepFs::attach(&session, "", &opts).await.unwrap();
    let mut ns = Namespace::new();
    ns.mount("/", Arc::new(fs), false).unwrap();
    (ns, proxy)
}

#[tokio::test]
async fn errors_sent_as_rerror_are_the_errnos_they_carry() {
    let dir = Tree::build(&[Tree::file("present.txt", "here")]);
    let server = TestServer::tcp(dir.path());
    for cache in MODES {
        let (ns, proxy) = mount_through(&server, Fault::AsRerror, cache).await;
        // Each failure is its own errno, not EIO, and the session goes on.
        for _ in 0..2 {
            assert_eq!(
                ns.getattr("/missing.h", true).await,
                Err(Errno::ENOENT),
                "{cache}"
            );
        }
        assert_eq!(
            ns.mkdir("/present.txt", 0o755).await.err(),
            Some(Errno::EEXIST),
            "{cache}"
        );
        assert_eq!(
            ns.unlink("/missing.h", false).await,
            Err(Errno::ENOENT),
            "{cache}"
        );
        assert_eq!(
            ns.read("/present.txt").await.unwrap(),
            Bytes::from("here"),
            "{cache}"
        );
        assert!(
            proxy.injected() >= 2,
            "{cache}: the errors went out as Rerror"
        );
    }
}

#[tokio::test]
async fn reads_shorter_than_asked_are_not_the_end_of_the_file() {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.bin"), &data).unwrap();
    let server = TestServer::tcp(dir.path());
    for cache in MODES {
        let (ns, proxy) = mount_through(&server, Fault::ShortRead(1000), cache).await;
        let loc = ns.resolve("/big.bin", true).await.unwrap();
        let read = OpenFlags {
            read: true,
            ..OpenFlags::default()
        };
        for pass in 0..2 {
            // Whole-file reads and reads across page boundaries, cold and then from
            // whatever the mode keeps.
            let file = ns.open_at(&loc, read).await.unwrap();
            let mut got = Vec::new();
            loop {
                let chunk = file.read_at(got.len() as u64, 64 * 1024).await.unwrap();
                if chunk.is_empty() {
                    break;
                }
                got.extend_from_slice(&chunk);
            }
            assert_eq!(got.len(), data.len(), "{cache} pass {pass}: length");
            assert!(got == data, "{cache} pass {pass}: contents");
            let middle = file.read_at(4000, 10_000).await.unwrap();
            assert!(!middle.is_empty() && middle[..] == data[4000..4000 + middle.len()]);
        }
        assert!(proxy.injected() > 0, "{cache}: the reads were shortened");
    }
}
