//! Complete directories (`complete_dirs=K`), on our server and on diod: after K
//! lookups a directory's listing answers every lookup in it, with the qid and kind a
//! walk would give; changes made through the mount keep the answers exact; a directory
//! too large is never kept; `off` reads no listing.

use super::coherence::{Remote, SERVERS};
use super::*;

fn include_dir(files: usize) -> tempfile::TempDir {
    let mut inc: Vec<Tree> = (0..files)
        .map(|i| Tree::file(Box::leak(format!("h{i}.h").into_boxed_str()), "int x;\n"))
        .collect();
    inc.push(Tree::Dir("sub", vec![Tree::file("deep.h", "int deep;\n")]));
    inc.push(Tree::Symlink("alias.h", "h0.h"));
    Tree::build(&[Tree::Dir("inc", inc)])
}

/// What `path` resolves to without following a last symlink: (id, kind), or the errno.
async fn what(ns: &Namespace, path: &str) -> Result<(u64, wasm9p_guest_fs::backend::Kind), Errno> {
    ns.resolve(path, false)
        .await
        .map(|l| (l.node.id, l.node.kind))
}

/// Each of `names` in /inc resolves on `ns` as on `truth` (a `cache=none` mount).
async fn same_answers(ns: &Namespace, truth: &Namespace, names: &[&str], server: &str) {
    for name in names {
        let path = format!("/inc/{name}");
        assert_eq!(
            what(ns, &path).await,
            what(truth, &path).await,
            "{server}: {name}"
        );
    }
}

#[tokio::test]
async fn after_k_lookups_the_listing_answers_every_name_as_a_walk_would() {
    let names = [
        "h0.h",
        "h1.h",
        "h7.h",
        "sub",
        "alias.h",
        "missing.h",
        "h99.h",
        "sub2",
    ];
    for server in SERVERS {
        let dir = include_dir(10);
        let remote = Remote::start(server, dir.path());
        let (truth, _) = remote.mount("cache=none").await;
        let (ns, fs) = remote.mount("cache=loose,complete_dirs=2").await;
        // Two names walked (h2.h, h3.h), then the listing is read at the third.
        for name in ["h2.h", "h3.h"] {
            assert!(ns.resolve(&format!("/inc/{name}"), false).await.is_ok());
        }
        assert_eq!(
            fs.cache_stats().listings_read,
            0,
            "{server}: listed too soon"
        );
        assert!(ns.resolve("/inc/h4.h", false).await.is_ok());
        assert_eq!(fs.cache_stats().listings_read, 1, "{server}");
        let (walks, listings) = (rpcs(&fs, "walk"), rpcs(&fs, "readdir"));
        same_answers(&ns, &truth, &names, server).await;
        assert_eq!(rpcs(&fs, "walk"), walks, "{server}: a name was walked");
        assert_eq!(rpcs(&fs, "readdir"), listings, "{server}: listed again");
        let stats = fs.cache_stats();
        assert!(
            stats.listing_hits >= names.len() as u64,
            "{server}: {stats:?}"
        );
    }
}

#[tokio::test]
async fn changes_through_the_mount_keep_the_listing_exact() {
    for server in SERVERS {
        let dir = include_dir(3);
        let remote = Remote::start(server, dir.path());
        let (truth, _) = remote.mount("cache=none").await;
        let (ns, fs) = remote.mount("cache=loose,complete_dirs=0").await;
        assert!(ns.resolve("/inc/h0.h", false).await.is_ok());
        // With K = 0 the root is listed at its first lookup too.
        assert_eq!(fs.cache_stats().listings_read, 2, "{server}: / and /inc");
        ns.create("/inc/new.h", 0o644, true).await.unwrap();
        ns.mkdir("/inc/newdir", 0o755).await.unwrap();
        ns.symlink("h1.h", "/inc/newlink.h").await.unwrap();
        ns.link("/inc/h1.h", "/inc/hard.h", false).await.unwrap();
        ns.unlink("/inc/h2.h", false).await.unwrap();
        ns.rename("/inc/h0.h", "/inc/moved.h").await.unwrap();
        ns.rename("/inc/sub", "/inc/sub-moved").await.unwrap();
        let names = [
            "new.h",
            "newdir",
            "newlink.h",
            "hard.h",
            "h1.h",
            "h2.h",
            "h0.h",
            "moved.h",
            "sub",
            "sub-moved",
            "alias.h",
            "never.h",
        ];
        let walks = rpcs(&fs, "walk");
        same_answers(&ns, &truth, &names, server).await;
        assert_eq!(
            rpcs(&fs, "walk"),
            walks,
            "{server}: the listing did not answer"
        );
        // A directory removed and made again is a new one, whatever its inode.
        ns.unlink("/inc/newdir", true).await.unwrap();
        ns.mkdir("/inc/newdir", 0o755).await.unwrap();
        assert_eq!(
            what(&ns, "/inc/newdir/x").await,
            Err(Errno::ENOENT),
            "{server}"
        );
    }
}

#[tokio::test]
async fn a_directory_over_the_bound_is_never_kept() {
    let dir = include_dir(wasm9p_guest_fs::cache::MAX_COMPLETE + 10);
    let remote = Remote::start("ours", dir.path());
    let (ns, fs) = remote.mount("cache=loose,complete_dirs=0").await;
    for i in 0..20 {
        assert_eq!(
            what(&ns, &format!("/inc/absent{i}.h")).await,
            Err(Errno::ENOENT)
        );
    }
    // The root's listing answers "inc" each time; /inc's was read once, found too
    // large, and never again: every absent name in it was walked.
    let stats = fs.cache_stats();
    assert_eq!(stats.listings_read, 2, "{stats:?}");
    assert_eq!(stats.listing_hits, 20, "{stats:?}");
    assert_eq!(stats.dentry_misses, 21, "{stats:?}");
    assert!(rpcs(&fs, "walk") >= 20, "each absent name walked");
}

#[tokio::test]
async fn complete_dirs_off_reads_no_listing() {
    let dir = include_dir(10);
    let remote = Remote::start("ours", dir.path());
    let (ns, fs) = remote.mount("cache=loose,complete_dirs=off").await;
    for i in 0..10 {
        assert!(ns.resolve(&format!("/inc/h{i}.h"), false).await.is_ok());
        let _ = ns.resolve(&format!("/inc/absent{i}.h"), false).await;
    }
    assert_eq!(rpcs(&fs, "readdir"), 0);
    assert_eq!(fs.cache_stats().listings_read, 0);
}
