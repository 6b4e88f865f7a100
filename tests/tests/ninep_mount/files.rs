//! Files through the mount: write-back and its errors, readahead, setattr, link,
//! statfs and readdir, renames, the RPCs of a compiler's pattern, the size bound.

use super::coherence::{Remote, SERVERS};
use super::*;

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
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn sequential_small_reads_are_served_by_readahead() {
    for kind in SERVERS {
        let dir = tree();
        let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 249) as u8).collect();
        std::fs::write(dir.path().join("big"), &big).unwrap();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn setattr_link_statfs_and_readdir_through_the_mount() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
        ns.link("/a", "/a-again", false).await.unwrap();
        assert_eq!(
            ns.getattr("/a", true).await.unwrap().nlink,
            2,
            "link count refreshed"
        );
        let names = sorted_names(&ns, "/").await;
        assert_eq!(names, ["a", "a-again", "b", "link", "usr"]);
        assert!(ns.statfs("/usr").await.unwrap().blocks > 0);
    }
}

#[tokio::test]
async fn rpc_counts_per_mode_for_the_compiler_pattern() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

/// Treaddirs of a listing read uncached (`cache=none`: a guest's call from each cookie
/// goes to the server): the flight's entries answer the call from cookie 0, and on our
/// server, which fills its listings, an empty directory's listing ends there.
#[tokio::test]
async fn an_uncached_listing_uses_its_flights_entries_and_ends_at_its_last_batch() {
    let dir = tree();
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    for kind in SERVERS {
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=none").await;
        let before = rpcs(&fs, "readdir");
        let names = sorted_names(&ns, "/").await;
        assert_eq!(names, ["a", "b", "empty", "link", "usr"], "{kind}");
        // From cookie 0 (the flight's Treaddir on ours), then from the last cookie
        // (empty: the end).
        assert_eq!(rpcs(&fs, "readdir") - before, 2, "{kind}");
        let before = rpcs(&fs, "readdir");
        assert!(ns.readdir("/empty").await.unwrap().is_empty(), "{kind}");
        // "." and ".." alone: on ours they end the listing; diod's ends empty.
        let want = if kind == "ours" { 1 } else { 2 };
        assert_eq!(rpcs(&fs, "readdir") - before, want, "{kind}");
    }
}

#[tokio::test]
async fn a_cold_open_fetches_the_attributes_its_fstat_asks_for_and_keeps_buffered_sizes() {
    // clang opens each header and fstats it: the attributes come with the open (a
    // Tgetattr beside the Tlopen), so the fstat sends nothing, in the modes that
    // believe attributes for a while, on either server.
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        for spec in ["cache=loose", "cache=loose,revalidate=1000"] {
            let (ns, fs) = mount(&server, spec).await;
            let file = ns.resolve("/usr/include/stdio.h", true).await.unwrap();
            let (opens, getattrs) = (rpcs(&fs, "lopen"), rpcs(&fs, "getattr"));
            let open = fs.open(&file.node, READ).await.unwrap();
            assert_eq!(rpcs(&fs, "lopen"), opens + 1, "{kind:?} {spec}");
            assert_eq!(rpcs(&fs, "getattr"), getattrs + 1, "{kind:?} {spec}");
            let total = fs.stats().rpc_total;
            assert_eq!(open.getattr().await.unwrap().size, 14, "{kind:?} {spec}");
            assert_eq!(
                fs.stats().rpc_total,
                total,
                "fstat sent nothing: {kind:?} {spec}"
            );
            let read = open.read_at(0, 64).await.unwrap();
            assert_eq!(&read[..], b"int printf();\n", "{kind:?} {spec}");
        }
        // A file another open buffers writes to: a read-only open's fstat sees the
        // size written, not the server's.
        let (ns, fs) = mount(&server, "cache=loose").await;
        let writer = open(&ns, &fs, "/a", WRITE).await;
        writer
            .write_at(0, Bytes::from_static(b"longer than it was, and buffered"))
            .await
            .unwrap();
        let reader = open(&ns, &fs, "/a", READ).await;
        assert_eq!(reader.getattr().await.unwrap().size, 32, "{kind:?}");
        writer.flush().await.unwrap();
    }
}

#[tokio::test]
async fn a_cold_open_on_our_server_is_one_flight_whose_pages_answer_the_fstat_and_reads() {
    // (And a cold stat, and a cold readlink: one flight each.)
    // Sizes around the flight's read (128 KiB) and the page (64 KiB): a header, a
    // file ending on a page boundary, one past what the flight reads, an empty one.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let page: Vec<u8> = (0..65_536u32).map(|i| (i % 13) as u8).collect();
    let dir = Tree::build(&[
        Tree::file("h.h", "int printf();\n"),
        Tree::File("page.bin", page.clone()),
        Tree::File("big.bin", big.clone()),
        Tree::file("empty", ""),
        Tree::file("unopened", "unopened"),
        Tree::Symlink("link", "h.h"),
    ]);
    for kind in SERVERS {
        let server = Remote::start(kind, dir.path());
        for spec in [
            "cache=loose",
            "cache=loose,revalidate=1000",
            "cache=loose,pipeline=off",
        ] {
            let (ns, fs) = mount(&server, spec).await;
            let flies = kind == "ours" && !spec.contains("pipeline=off");
            for (path, want) in [
                ("/h.h", &b"int printf();\n"[..]),
                ("/page.bin", &page[..]),
                ("/big.bin", &big[..]),
                ("/empty", &b""[..]),
            ] {
                let what = format!("{kind} {spec} {path}");
                let file = ns.resolve(path, true).await.unwrap();
                let (flights, reads) = (fs.stats().flights, rpcs(&fs, "read"));
                let open = fs.open(&file.node, READ).await.unwrap();
                assert_eq!(fs.stats().flights, flights + u64::from(flies), "{what}");
                assert_eq!(rpcs(&fs, "read"), reads + u64::from(flies), "{what}");
                // Counted by type: the Tclunk of the file before may still go out.
                let asked = || ["walk", "lopen", "getattr", "read"].map(|t| rpcs(&fs, t));
                let before = asked();
                assert_eq!(open.getattr().await.unwrap().size, want.len() as u64);
                let got = open.read_at(0, 300_000).await.unwrap();
                assert_eq!(&got[..], want, "{what}");
                let end = open.read_at(want.len() as u64, 10).await.unwrap();
                assert!(end.is_empty(), "{what}");
                let after = asked();
                let sent: u64 = (0..4).map(|i| after[i] - before[i]).sum();
                if flies && want.len() <= 128 << 10 {
                    assert_eq!(sent, 0, "fstat and reads came with the open: {what}");
                }
            }
            // A stat of a file the cache does not know: one flight (walk, attributes).
            ns.resolve("/unopened", true).await.unwrap();
            let (flights, walks) = (fs.stats().flights, rpcs(&fs, "walk"));
            let getattrs = rpcs(&fs, "getattr");
            let attr = ns.getattr("/unopened", true).await.unwrap();
            assert_eq!(attr.size, 8, "{kind} {spec}");
            assert_eq!(rpcs(&fs, "walk"), walks + 1, "{kind} {spec}");
            assert_eq!(rpcs(&fs, "getattr"), getattrs + 1, "{kind} {spec}");
            assert_eq!(
                fs.stats().flights,
                flights + u64::from(flies),
                "{kind} {spec}"
            );
            assert_eq!(fs.stats().flight_retries, 0, "{kind} {spec}");
            // A link read cold: one flight (walk, readlink).
            ns.resolve("/link", false).await.unwrap();
            let (flights, walks) = (fs.stats().flights, rpcs(&fs, "walk"));
            let readlinks = rpcs(&fs, "readlink");
            assert_eq!(ns.readlink("/link").await.unwrap().as_ref(), "h.h");
            assert_eq!(rpcs(&fs, "walk"), walks + 1, "{kind} {spec}");
            assert_eq!(rpcs(&fs, "readlink"), readlinks + 1, "{kind} {spec}");
            assert_eq!(
                fs.stats().flights,
                flights + u64::from(flies),
                "{kind} {spec}"
            );
            assert_eq!(fs.stats().flight_retries, 0, "{kind} {spec}");
            if spec.contains("pipeline=off") {
                assert_eq!(rpcs(&fs, "xattrwalk"), 0, "not even asked: {kind}");
            }
        }
    }
}

#[tokio::test]
async fn rename_over_a_cached_name_is_seen_at_once() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn caches_stay_within_cache_size_on_a_tree_larger_than_it() {
    for kind in SERVERS {
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
        let server = Remote::start(kind, dir.path());
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
}
