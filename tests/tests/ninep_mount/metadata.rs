//! Lookups, negative entries, symlink targets and attributes: what each cache mode
//! asks the server, and what a change through the mount drops.

use super::coherence::{Remote, SERVERS};
use super::*;

#[tokio::test]
async fn loose_mode_answers_repeated_lookups_without_rpcs() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=loose").await;
        // A missing header and a present one, as a compiler probes them.
        let probe = async || {
            let missing = ns.resolve("/usr/include/missing.h", true).await;
            assert_eq!(missing.unwrap_err(), Errno::ENOENT);
            assert!(ns.resolve("/usr/include/stdio.h", true).await.is_ok());
        };
        probe().await;
        let walks = rpcs(&fs, "walk");
        for _ in 0..100 {
            probe().await;
        }
        assert_eq!(
            rpcs(&fs, "walk"),
            walks,
            "no walk for a cached name, present or missing"
        );
        let stats = fs.cache_stats();
        assert_eq!(stats.negative_hits, 100);
        // Names found by a dentry of their own, or by their directory's listing
        // (complete directories).
        assert!(stats.dentry_hits + stats.listing_hits >= 500, "{stats:?}");
    }
}

#[tokio::test]
async fn cache_none_asks_the_server_every_time() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn local_changes_drop_the_negative_entries_they_make_stale() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn negative_entries_expire_after_negtimeout() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn symlink_targets_are_cached_and_never_outlive_their_link() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn symlink_cache_off_reads_every_link_from_the_server_and_keeps_the_other_caches() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

#[tokio::test]
async fn concurrent_misses_for_one_name_make_one_rpc() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        // No caching at all: only the shared in-flight walk can save RPCs here.
        let (ns, fs) = mount(&server, "cache=none,negtimeout=0").await;
        let ns = Arc::new(ns);
        let walks = rpcs(&fs, "walk");
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let ns = ns.clone();
                tokio::spawn(
                    async move { ns.resolve("/usr/include/absent.h", true).await.map(drop) },
                )
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
}

#[tokio::test]
async fn files_written_through_the_mount_are_on_the_host() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
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
}

/// `cache=none`: a node keeps the fid its lookup walked to, so a path resolves one
/// Twalk of one name per component (each from its parent's fid, not the whole path
/// from the root again), its attributes and a link's target come through its own fid
/// with no walk, and a lookup from a directory already resolved walks one name.
#[tokio::test]
async fn cache_none_walks_each_name_once_from_its_parents_fid() {
    let dir = tree();
    let server = Remote::start("ours", dir.path());
    let (ns, fs) = mount(&server, "cache=none").await;
    let walks = || rpcs(&fs, "walk");
    let header = ns.resolve("/usr/include/stdio.h", false).await.unwrap();
    assert_eq!(walks(), 3, "one walk per name");
    let getattrs = rpcs(&fs, "getattr");
    let attr = ns.getattr_at(&header).await.unwrap();
    assert_eq!(attr.size, 14);
    assert_eq!((walks(), rpcs(&fs, "getattr")), (3, getattrs + 1));
    let include = ns.resolve("/usr/include", false).await.unwrap();
    assert_eq!(walks(), 5);
    let again = ns.lookup_at(&include, "stdio.h").await.unwrap();
    assert_eq!(walks(), 6, "one name from the directory's fid");
    assert_eq!(again.node.id, header.node.id);
    assert_eq!(
        ns.lookup_at(&include, "missing.h").await.unwrap_err(),
        Errno::ENOENT
    );
    // A link's target: one Treadlink on the fid its lookup kept, no second walk.
    let before = walks();
    assert_eq!(&*ns.readlink("/link").await.unwrap(), "a");
    assert_eq!((walks(), rpcs(&fs, "readlink")), (before + 1, 1));
    // The fids go with the nodes: dropped, each is clunked (by a spawned Tclunk).
    let clunks = rpcs(&fs, "clunk");
    drop((header, include, again));
    for _ in 0..50 {
        if rpcs(&fs, "clunk") >= clunks + 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rpcs(&fs, "clunk") >= clunks + 3, "held fids clunked");
}
