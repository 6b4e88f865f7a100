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

async fn mount(server: &TestServer, spec: &str) -> (Namespace, Arc<NinepFs>) {
    let opts = options(spec);
    let session = Session::connect(
        &server.addr,
        ClientConfig {
            msize: opts.msize,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let fs = Arc::new(NinepFs::attach(&session, "", &opts).await.unwrap());
    let mut ns = Namespace::new();
    ns.mount("/", fs.clone(), opts.read_only).unwrap();
    (ns, fs)
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

#[tokio::test]
async fn loose_mode_answers_repeated_lookups_without_rpcs() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    assert_eq!(
        ns.resolve("/usr/include/missing.h", true)
            .await
            .unwrap_err(),
        Errno::ENOENT
    );
    assert!(ns.resolve("/usr/include/stdio.h", true).await.is_ok());
    let walks = rpcs(&fs, "walk");
    for _ in 0..100 {
        assert_eq!(
            ns.resolve("/usr/include/missing.h", true)
                .await
                .unwrap_err(),
            Errno::ENOENT
        );
        assert!(ns.resolve("/usr/include/stdio.h", true).await.is_ok());
    }
    assert_eq!(
        rpcs(&fs, "walk"),
        walks,
        "no walk for a cached name, present or missing"
    );
    let stats = fs.cache_stats();
    assert_eq!(stats.negative_hits, 100);
    assert!(stats.dentry_hits >= 500, "{stats:?}");
}

#[tokio::test]
async fn cache_none_asks_the_server_every_time() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=none").await;
    let walks = rpcs(&fs, "walk");
    for _ in 0..10 {
        assert_eq!(
            ns.resolve("/usr/include/missing.h", true)
                .await
                .unwrap_err(),
            Errno::ENOENT
        );
    }
    assert_eq!(rpcs(&fs, "walk") - walks, 30, "three components, ten times");
    assert_eq!(fs.cache_stats().negative_hits, 0);
}

#[tokio::test]
async fn local_changes_drop_the_negative_entries_they_make_stale() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, _fs) = mount(&server, "cache=loose").await;
    for name in ["/new-file", "/new-dir", "/new-link", "/renamed"] {
        assert_eq!(ns.resolve(name, false).await.unwrap_err(), Errno::ENOENT);
    }
    ns.create("/new-file", 0o644, true).await.unwrap();
    ns.mkdir("/new-dir", 0o755).await.unwrap();
    ns.symlink("a", "/new-link").await.unwrap();
    ns.rename("/b", "/renamed").await.unwrap();
    for name in ["/new-file", "/new-dir", "/new-link", "/renamed"] {
        assert!(
            ns.resolve(name, false).await.is_ok(),
            "{name} must be seen at once"
        );
    }
    // And the other way: what was unlinked or renamed away is gone at once.
    assert_eq!(ns.resolve("/b", true).await.unwrap_err(), Errno::ENOENT);
    ns.unlink("/new-file", false).await.unwrap();
    assert_eq!(
        ns.resolve("/new-file", true).await.unwrap_err(),
        Errno::ENOENT
    );
    assert!(dir.path().join("renamed").exists() && !dir.path().join("new-file").exists());
}

#[tokio::test]
async fn negative_entries_expire_after_negtimeout() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=none,negtimeout=300").await;
    assert_eq!(
        ns.resolve("/gone.h", true).await.unwrap_err(),
        Errno::ENOENT
    );
    let walks = rpcs(&fs, "walk");
    assert_eq!(
        ns.resolve("/gone.h", true).await.unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(rpcs(&fs, "walk"), walks, "served by the negative entry");
    // Created behind the mount's back: seen once the entry has expired.
    std::fs::write(dir.path().join("gone.h"), b"back").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(ns.resolve("/gone.h", true).await.is_ok());
    assert_eq!(rpcs(&fs, "walk"), walks + 1);
}

#[tokio::test]
async fn symlink_targets_are_cached_and_never_outlive_their_link() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    assert_eq!(&ns.read("/link").await.unwrap()[..], b"content of a");
    let readlinks = rpcs(&fs, "readlink");
    assert_eq!(&ns.read("/link").await.unwrap()[..], b"content of a");
    assert_eq!(ns.readlink("/link").await.unwrap().as_ref(), "a");
    assert_eq!(
        rpcs(&fs, "readlink"),
        readlinks,
        "target served from the cache"
    );
    // Replace the link through the mount: the new target is used at once.
    ns.unlink("/link", false).await.unwrap();
    ns.symlink("b", "/link").await.unwrap();
    assert_eq!(&ns.read("/link").await.unwrap()[..], b"content of b");
    assert!(fs.cache_stats().symlink_hits >= 2);
}

#[tokio::test]
async fn symlink_cache_off_reads_every_link_from_the_server_and_keeps_the_other_caches() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose,symlink_cache=off").await;
    assert_eq!(&ns.read("/link").await.unwrap()[..], b"content of a");
    let readlinks = rpcs(&fs, "readlink");
    let dentry_hits = fs.cache_stats().dentry_hits;
    assert_eq!(&ns.read("/link").await.unwrap()[..], b"content of a");
    assert_eq!(ns.readlink("/link").await.unwrap().as_ref(), "a");
    assert_eq!(
        rpcs(&fs, "readlink"),
        readlinks + 2,
        "one Treadlink per use"
    );
    assert_eq!(fs.cache_stats().symlink_hits, 0);
    // Dentries are still cached: the names were found without asking the server.
    assert!(fs.cache_stats().dentry_hits > dentry_hits);
    assert_eq!(fs.cache_stats().dentry_misses, 2, "/link and /a, once each");
}

#[tokio::test]
async fn concurrent_misses_for_one_name_make_one_rpc() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    // No caching at all: only the shared in-flight walk can save RPCs here.
    let (ns, fs) = mount(&server, "cache=none,negtimeout=0").await;
    let ns = Arc::new(ns);
    let walks = rpcs(&fs, "walk");
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let ns = ns.clone();
            tokio::spawn(async move { ns.resolve("/usr/include/absent.h", true).await.map(drop) })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), Err(Errno::ENOENT));
    }
    assert_eq!(
        rpcs(&fs, "walk") - walks,
        3,
        "one walk per component, not 16"
    );
}

#[tokio::test]
async fn files_written_through_the_mount_are_on_the_host() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose,msize=8192").await;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
    ns.mkdir("/out", 0o755).await.unwrap();
    ns.write("/out/obj.o", 0, Bytes::from(data.clone()))
        .await
        .unwrap();
    assert_eq!(std::fs::read(dir.path().join("out/obj.o")).unwrap(), data);
    assert_eq!(
        ns.read("/out/obj.o").await.unwrap(),
        data,
        "size refreshed after the write"
    );
    ns.rename("/out/obj.o", "/out/final.o").await.unwrap();
    assert!(dir.path().join("out/final.o").exists());
    let out = ns.resolve("/out", true).await.unwrap();
    let listing = Backend::readdir(&*fs, &out.node, 0).await.unwrap();
    let names: Vec<&str> = listing.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["final.o"]);
    // Writes went out in msize-sized pieces: 100,000 bytes at msize 8192.
    assert!(
        rpcs(&fs, "write") >= 100_000 / 8192,
        "{}",
        rpcs(&fs, "write")
    );
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

/// clang's pattern: an object file written in thousands of tiny pwrites.
async fn tiny_writes(spec: &str, count: u32) -> (Vec<u8>, u64, tempfile::TempDir) {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, spec).await;
    ns.create("/obj.o", 0o644, true).await.unwrap();
    let file = open(&ns, &fs, "/obj.o", WRITE).await;
    let before = rpcs(&fs, "write");
    let mut expected = Vec::new();
    for i in 0..count {
        let piece: Vec<u8> = (0..9).map(|j| (i * 9 + j) as u8).collect();
        assert_eq!(
            file.write_at(expected.len() as u64, Bytes::from(piece.clone()))
                .await
                .unwrap(),
            9
        );
        expected.extend_from_slice(&piece);
    }
    assert_eq!(file.size().await.unwrap(), expected.len() as u64);
    file.flush().await.unwrap();
    let writes = rpcs(&fs, "write") - before;
    drop(file);
    (expected, writes, dir)
}

#[tokio::test]
async fn tiny_writes_are_coalesced_into_msize_writes_with_writeback() {
    let (expected, writes, dir) = tiny_writes("cache=mmap,msize=65536", 11_000).await;
    assert_eq!(std::fs::read(dir.path().join("obj.o")).unwrap(), expected);
    assert!(writes <= 2, "99,000 bytes went out in {writes} Twrites");
    // Without write-back every write is its own RPC.
    let (expected, writes, dir) = tiny_writes("cache=none", 500).await;
    assert_eq!(std::fs::read(dir.path().join("obj.o")).unwrap(), expected);
    assert_eq!(writes, 500);
}

#[tokio::test]
async fn a_failed_write_back_is_reported_by_flush_not_lost() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    ns.create("/out.o", 0o644, true).await.unwrap();
    let file = open(&ns, &fs, "/out.o", WRITE).await;
    file.write_at(0, Bytes::from_static(b"buffered, not yet sent"))
        .await
        .unwrap();
    assert_eq!(rpcs(&fs, "write"), 0, "still buffered");
    drop(server); // the server goes away before the data does
    assert_eq!(file.flush().await, Err(Errno::EIO));
}

#[tokio::test]
async fn sequential_small_reads_are_served_by_readahead() {
    let dir = tree();
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 249) as u8).collect();
    std::fs::write(dir.path().join("big"), &big).unwrap();
    let server = TestServer::tcp(dir.path());
    for (spec, max_rpcs) in [
        ("cache=readahead,msize=65536", 40u64),
        ("cache=none,msize=65536", 10_000),
    ] {
        let (ns, fs) = mount(&server, spec).await;
        let file = open(&ns, &fs, "/big", READ).await;
        let before = rpcs(&fs, "read");
        let mut got = Vec::new();
        loop {
            let chunk = file.read_at(got.len() as u64, 4096).await.unwrap();
            if chunk.is_empty() {
                break;
            }
            got.extend_from_slice(&chunk);
        }
        assert!(got == big, "{spec}: content");
        let reads = rpcs(&fs, "read") - before;
        assert!(
            reads <= max_rpcs,
            "{spec}: {reads} Treads for 245 reads of 4 KiB"
        );
        if spec.starts_with("cache=readahead") {
            assert!(fs.cache_stats().page_hits > 200, "{:?}", fs.cache_stats());
        } else {
            assert!(
                reads >= 245,
                "{spec}: no readahead, one Tread per read ({reads})"
            );
        }
    }
}

#[tokio::test]
async fn setattr_link_statfs_and_readdir_through_the_mount() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    // Attributes are cached, and a setattr through the mount refreshes them.
    assert_eq!(ns.getattr("/a", true).await.unwrap().size, 12);
    let getattrs = rpcs(&fs, "getattr");
    assert_eq!(ns.getattr("/a", true).await.unwrap().size, 12);
    assert_eq!(
        rpcs(&fs, "getattr"),
        getattrs,
        "served from the attribute cache"
    );
    let set = wasm9p_guest_fs::backend::SetAttr {
        size: Some(4),
        mode: Some(0o640),
        ..Default::default()
    };
    ns.setattr("/a", &set, true).await.unwrap();
    let a = ns.getattr("/a", true).await.unwrap();
    assert_eq!((a.size, a.mode), (4, 0o640));
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir.path().join("a")).unwrap();
    assert_eq!((m.len(), m.mode() & 0o777), (4, 0o640));
    ns.link("/a", "/a-again").await.unwrap();
    assert_eq!(
        ns.getattr("/a", true).await.unwrap().nlink,
        2,
        "link count refreshed"
    );
    let mut names: Vec<String> = ns
        .readdir("/")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(names, ["a", "a-again", "b", "link", "usr"]);
    assert!(ns.statfs("/usr").await.unwrap().blocks > 0);
}

#[tokio::test]
async fn rpc_counts_per_mode_for_the_compiler_pattern() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    // stat of a missing name twice: loose → 1 walk, none → 2 (per component: the
    // parents are resolved first and are cached under loose too).
    for (spec, expected_walks) in [("cache=loose", 1u64), ("cache=none", 2)] {
        let (ns, fs) = mount(&server, spec).await;
        let before = rpcs(&fs, "walk");
        for _ in 0..2 {
            assert_eq!(
                ns.getattr("/missing.h", true).await.unwrap_err(),
                Errno::ENOENT
            );
        }
        assert_eq!(rpcs(&fs, "walk") - before, expected_walks, "{spec}");
    }
    // readlink of the same link 1,000 times under loose → 1 Treadlink.
    let (ns, fs) = mount(&server, "cache=loose").await;
    for _ in 0..1000 {
        assert_eq!(ns.readlink("/link").await.unwrap().as_ref(), "a");
    }
    assert_eq!(rpcs(&fs, "readlink"), 1);
    // A directory listing is cached too, and refreshed by a change in it.
    let first = ns.readdir("/usr/include").await.unwrap();
    let reads = rpcs(&fs, "readdir");
    assert_eq!(ns.readdir("/usr/include").await.unwrap(), first);
    assert_eq!(rpcs(&fs, "readdir"), reads);
    ns.create("/usr/include/new.h", 0o644, true).await.unwrap();
    assert_eq!(
        ns.readdir("/usr/include").await.unwrap().len(),
        first.len() + 1
    );
    let stats = fs.stats();
    assert!(
        stats.cache.readdir_hits >= 1 && stats.rpc_total > 0 && stats.cache_bytes > 0,
        "{stats:?}"
    );
}

#[tokio::test]
async fn rename_over_a_cached_name_is_seen_at_once() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, _fs) = mount(&server, "cache=loose").await;
    assert_eq!(&ns.read("/a").await.unwrap()[..], b"content of a");
    assert_eq!(&ns.read("/b").await.unwrap()[..], b"content of b");
    ns.rename("/b", "/a").await.unwrap();
    assert_eq!(
        &ns.read("/a").await.unwrap()[..],
        b"content of b",
        "the cached /a is gone"
    );
    assert_eq!(ns.resolve("/b", true).await.unwrap_err(), Errno::ENOENT);
}

#[tokio::test]
async fn caches_stay_within_cache_size_on_a_tree_larger_than_it() {
    let dir = tempfile::tempdir().unwrap();
    for d in 0..20 {
        std::fs::create_dir(dir.path().join(format!("d{d}"))).unwrap();
        for f in 0..100 {
            std::fs::write(
                dir.path()
                    .join(format!("d{d}/file-with-a-longish-name-{f}.h")),
                b"x",
            )
            .unwrap();
        }
    }
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose,cache_size=65536").await;
    for d in 0..20 {
        for f in 0..100 {
            let path = format!("/d{d}/file-with-a-longish-name-{f}.h");
            assert!(ns.getattr(&path, true).await.is_ok());
            assert_eq!(
                ns.resolve(&format!("{path}.missing"), true)
                    .await
                    .unwrap_err(),
                Errno::ENOENT
            );
            let stats = fs.stats();
            assert!(
                stats.cache_bytes <= 65536,
                "{} bytes cached",
                stats.cache_bytes
            );
        }
    }
    // Still correct after all that eviction.
    assert_eq!(
        &ns.read("/d0/file-with-a-longish-name-0.h").await.unwrap()[..],
        b"x"
    );
}

#[tokio::test]
async fn pages_are_shared_by_every_open_and_follow_the_file_version() {
    let dir = tree();
    let header: Vec<u8> = (0..300_000u32).map(|i| (i % 239) as u8).collect();
    std::fs::write(dir.path().join("big.h"), &header).unwrap();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    // The first guest reads the header: pages come from the server.
    let first = open(&ns, &fs, "/big.h", READ).await;
    assert!(first.read_at(0, 1 << 20).await.unwrap() == header);
    drop(first);
    // Eight more guests read it: no Tread at all.
    let reads = rpcs(&fs, "read");
    for _ in 0..8 {
        let f = open(&ns, &fs, "/big.h", READ).await;
        assert!(f.read_at(0, 1 << 20).await.unwrap() == header);
        assert_eq!(
            &f.read_at(299_990, 100).await.unwrap()[..],
            &header[299_990..]
        );
        assert!(
            f.read_at(300_000, 10).await.unwrap().is_empty(),
            "end of file, from the cache"
        );
    }
    assert_eq!(
        rpcs(&fs, "read"),
        reads,
        "every page served from the shared cache"
    );
    // The file changes on the server. Loose trusts what it cached (v9fs: "for
    // exclusive or read-only mounts"); a mount that opens on the server (mmap, pages
    // without metadata caching) sees the new version at the next open, not old pages.
    let (ns_mmap, fs_mmap) = mount(&server, "cache=mmap").await;
    let f = open(&ns_mmap, &fs_mmap, "/big.h", READ).await;
    assert!(f.read_at(0, 1 << 20).await.unwrap() == header);
    std::fs::write(dir.path().join("big.h"), b"rewritten").unwrap();
    let f = open(&ns_mmap, &fs_mmap, "/big.h", READ).await;
    assert_eq!(&f.read_at(0, 100).await.unwrap()[..], b"rewritten");
    // A loose open for writing goes to the server (and sees the new version); writing
    // through it, then reading through it, sees the write.
    let rw = OpenFlags {
        read: true,
        write: true,
        ..Default::default()
    };
    let f = open(&ns, &fs, "/big.h", rw).await;
    assert_eq!(&f.read_at(0, 3).await.unwrap()[..], b"rew");
    f.write_at(0, Bytes::from_static(b"RE")).await.unwrap();
    assert_eq!(&f.read_at(0, 100).await.unwrap()[..], b"REwritten");
    f.flush().await.unwrap();
}

#[tokio::test]
async fn an_open_reader_sees_writes_and_truncates_through_another_open() {
    // Found by fsx through `wasm9p mount`: a reader's pages, keyed by the version the
    // file was opened at, outlived a write through another open of the same mount.
    for mode in ["cache=mmap", "cache=loose"] {
        let dir = tree();
        std::fs::write(dir.path().join("f"), vec![0u8; 100_000]).unwrap();
        let server = TestServer::tcp(dir.path());
        let (ns, fs) = mount(&server, mode).await;
        let reader = open(&ns, &fs, "/f", READ).await;
        assert!(reader
            .read_at(0, 100_000)
            .await
            .unwrap()
            .iter()
            .all(|&b| b == 0));
        let rw = OpenFlags {
            read: true,
            write: true,
            ..Default::default()
        };
        let writer = open(&ns, &fs, "/f", rw).await;
        // A partial-page write, still buffered by write-back: the reader sees it.
        writer
            .write_at(40_000, Bytes::from_static(b"fresh"))
            .await
            .unwrap();
        assert_eq!(
            &reader.read_at(39_998, 9).await.unwrap()[..],
            b"\0\0fresh\0\0",
            "{mode}"
        );
        // A truncate through the namespace: the reader's next read ends there.
        let shorter = SetAttr {
            size: Some(40_002),
            ..Default::default()
        };
        ns.setattr("/f", &shorter, true).await.unwrap();
        assert_eq!(
            &reader.read_at(39_998, 100).await.unwrap()[..],
            b"\0\0fr",
            "{mode}"
        );
        // Pages of a file nobody changed are still shared (no extra Tread).
        writer.flush().await.unwrap();
        let reads = rpcs(&fs, "read");
        assert_eq!(&reader.read_at(39_998, 100).await.unwrap()[..], b"\0\0fr");
        assert_eq!(
            rpcs(&fs, "read"),
            reads,
            "{mode}: the new generation is cached"
        );
    }
}

#[tokio::test]
async fn cached_9p_lookups_complete_without_suspending() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    fn poll_once<F: Future>(f: F) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        }
    }
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    // Cold: the first resolution has to ask the server, so it suspends.
    assert!(poll_once(ns.resolve("/usr/include/stdio.h", true)).is_none());
    ns.resolve("/usr/include/stdio.h", true).await.unwrap();
    ns.resolve("/usr/include/missing.h", true)
        .await
        .unwrap_err();
    ns.readlink("/link").await.unwrap();
    ns.resolve("/link", true).await.unwrap();
    let walks = rpcs(&fs, "walk");
    // Warm: present, missing and through a symlink, all answered on the first poll.
    let found = poll_once(ns.resolve("/usr/include/stdio.h", true)).expect("no suspension");
    assert!(found.is_ok());
    let missing = poll_once(ns.resolve("/usr/include/missing.h", true)).expect("no suspension");
    assert_eq!(missing.unwrap_err(), Errno::ENOENT);
    let via_link = poll_once(ns.resolve("/link", true)).expect("no suspension");
    assert!(via_link.is_ok());
    assert_eq!(rpcs(&fs, "walk"), walks);
}

/// Several readers at once on one mount, every file read in small pieces while
/// readahead pipelines and abandons larger reads: what each reads is the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_with_readahead_read_every_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for i in 0..120usize {
        let len = (i * 7919) % 70_000;
        let data: Vec<u8> = (0..len).map(|j| (j * 31 + i) as u8).collect();
        std::fs::write(dir.path().join(format!("f{i}")), &data).unwrap();
        files.push((format!("/f{i}"), data));
    }
    let files = Arc::new(files);
    let server = TestServer::tcp(dir.path());
    for spec in [
        "cache=none,msize=8192",
        "cache=readahead,msize=8192",
        "cache=loose,msize=8192",
    ] {
        let (ns, _fs) = mount(&server, spec).await;
        let ns = Arc::new(ns);
        let mut tasks = Vec::new();
        for t in 0..4usize {
            let (ns, files) = (ns.clone(), files.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..3 {
                    for k in 0..files.len() {
                        let (path, want) = &files[(k * 7 + t * 13 + round) % files.len()];
                        let file = ns
                            .open(
                                path,
                                OpenFlags {
                                    read: true,
                                    ..Default::default()
                                },
                            )
                            .await
                            .unwrap_or_else(|e| panic!("{spec}: open {path}: {e}"));
                        let mut got = Vec::new();
                        loop {
                            let piece = file
                                .read_at(got.len() as u64, 4096)
                                .await
                                .unwrap_or_else(|e| panic!("{spec}: read {path}: {e}"));
                            if piece.is_empty() {
                                break;
                            }
                            got.extend_from_slice(&piece);
                        }
                        assert!(
                            got == *want,
                            "{spec}: {path} read {} bytes, not its {}",
                            got.len(),
                            want.len()
                        );
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    }
}

/// Writes an open file still buffers count for a stat by path, and land before a
/// truncate by path (v9fs writes dirty pages back before getattr and setattr).
#[tokio::test]
async fn buffered_writes_are_sent_before_a_stat_or_truncate_by_path() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    for spec in ["cache=mmap", "cache=loose"] {
        let (ns, fs) = mount(&server, spec).await;
        ns.create("/grow", 0o644, true).await.unwrap();
        let file = ns
            .open(
                "/grow",
                OpenFlags {
                    write: true,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        file.write_at(0, Bytes::from_static(b"0123456789"))
            .await
            .unwrap();
        assert_eq!(rpcs(&fs, "write"), 0, "{spec}: buffered");
        assert_eq!(ns.getattr("/grow", true).await.unwrap().size, 10, "{spec}");
        file.write_at(20, Bytes::from_static(b"tail"))
            .await
            .unwrap();
        let truncate = wasm9p_guest_fs::backend::SetAttr {
            size: Some(5),
            ..Default::default()
        };
        ns.setattr("/grow", &truncate, true).await.unwrap();
        file.flush().await.unwrap();
        drop(file);
        assert_eq!(
            std::fs::read(dir.path().join("grow")).unwrap(),
            b"01234",
            "{spec}: the truncate came after the buffered writes"
        );
        std::fs::remove_file(dir.path().join("grow")).unwrap();
    }
}

async fn read_all(ns: &Namespace, path: &str) -> Result<Bytes, Errno> {
    let file = ns
        .open(
            path,
            OpenFlags {
                read: true,
                ..Default::default()
            },
        )
        .await?;
    let size = file.size().await?;
    let data = file.read_at(0, 4096).await?;
    assert_eq!(data.len() as u64, size);
    Ok(data)
}

/// Loose mode: reopening a file read before costs no RPC (not even Twalk/Tlopen/
/// Tclunk); a file changed through the mount is opened on the server again and read
/// fresh; a first open still goes to the server, so its errors come from there.
#[tokio::test]
async fn loose_reopen_of_a_file_only_opened_before_sends_nothing() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    let read = OpenFlags {
        read: true,
        ..Default::default()
    };
    // Opened and closed, never read (what a build's existence checks do).
    drop(ns.open("/b", read).await.unwrap());
    assert_eq!(rpcs(&fs, "lopen"), 1);
    // Let the first open's Tclunk (sent by a spawned task) go out before counting.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let before = fs.session().counts().total();
    for _ in 0..100 {
        drop(ns.open("/b", read).await.unwrap());
    }
    assert_eq!(fs.session().counts().total(), before, "warm opens, no RPC");
    // A read through such an open still gets the file (opened on the server then).
    assert_eq!(read_all(&ns, "/b").await.unwrap(), "content of b");
    assert_eq!(rpcs(&fs, "lopen"), 2);
    // New permissions through the mount: the server decides the next open again.
    let chmod = wasm9p_guest_fs::backend::SetAttr {
        mode: Some(0o600),
        ..Default::default()
    };
    ns.setattr("/b", &chmod, true).await.unwrap();
    drop(ns.open("/b", read).await.unwrap());
    assert_eq!(rpcs(&fs, "lopen"), 3);
    // ... and once it has, the opens after it are warm again.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let before = fs.session().counts().total();
    drop(ns.open("/b", read).await.unwrap());
    assert_eq!(
        fs.session().counts().total(),
        before,
        "warm again after the change"
    );
}

#[tokio::test]
async fn loose_reopens_of_a_file_written_through_the_mount_go_out_once_then_are_warm() {
    // A file made by the build itself (a generated header), then included many times.
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    ns.write(
        "/generated.h",
        0,
        Bytes::from_static(b"#define GENERATED 1\n"),
    )
    .await
    .unwrap();
    let read = OpenFlags {
        read: true,
        ..Default::default()
    };
    let lopens = rpcs(&fs, "lopen");
    drop(ns.open("/generated.h", read).await.unwrap());
    assert_eq!(
        rpcs(&fs, "lopen"),
        lopens + 1,
        "the first open after the write asks"
    );
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let before = fs.session().counts().total();
    for _ in 0..100 {
        drop(ns.open("/generated.h", read).await.unwrap());
    }
    assert_eq!(
        fs.session().counts().total(),
        before,
        "100 warm opens, no RPC"
    );
    assert_eq!(
        read_all(&ns, "/generated.h").await.unwrap(),
        "#define GENERATED 1\n"
    );
    // Written again: the next open asks again, and reads the new bytes.
    ns.write(
        "/generated.h",
        0,
        Bytes::from_static(b"#define GENERATED 2\n"),
    )
    .await
    .unwrap();
    assert_eq!(
        read_all(&ns, "/generated.h").await.unwrap(),
        "#define GENERATED 2\n"
    );
}

#[tokio::test]
async fn loose_reopen_of_a_file_read_before_sends_nothing() {
    let dir = tree();
    let server = TestServer::tcp(dir.path());
    let (ns, fs) = mount(&server, "cache=loose").await;
    assert_eq!(read_all(&ns, "/a").await.unwrap(), "content of a");
    let before = fs.session().counts().total();
    for _ in 0..100 {
        assert_eq!(read_all(&ns, "/a").await.unwrap(), "content of a");
    }
    assert_eq!(
        fs.session().counts().total(),
        before,
        "100 warm opens, no RPC"
    );

    // Changed through the mount: the next open asks the server and sees the change.
    ns.write("/a", 0, Bytes::from_static(b"CONTENT"))
        .await
        .unwrap();
    assert_eq!(read_all(&ns, "/a").await.unwrap(), "CONTENT of a");
    assert!(rpcs(&fs, "lopen") > 0);

    // A first open goes to the server, which answers for it.
    let missing = read_all(&ns, "/usr/include/none.h").await.unwrap_err();
    assert_eq!(missing, Errno::ENOENT);
}
