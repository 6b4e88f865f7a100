//! Behaviour of the mount cache: what a guest-fs backend relies on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasm9p_proto::consts::qid;
use wasm9p_proto::{Qid, Rgetattr};

use super::{Lookup, MountCache, Policy};
use crate::mount_options::{CacheMode, NegTimeout, Trust};

const DIR: u64 = 7;

fn file(path: u64) -> Qid {
    Qid {
        ty: qid::FILE,
        version: 1,
        path,
    }
}

fn link(path: u64, version: u32) -> Qid {
    Qid {
        ty: qid::SYMLINK,
        version,
        path,
    }
}

fn loose() -> MountCache {
    MountCache::new(1 << 20, NegTimeout::For(Duration::from_secs(86_400)))
}

#[test]
fn positive_and_negative_dentries_replace_each_other() {
    let cache = loose();
    assert_eq!(cache.lookup(DIR, "stdio.h"), Lookup::Unknown);
    cache.insert_negative(DIR, "stdio.h");
    assert_eq!(cache.lookup(DIR, "stdio.h"), Lookup::Missing);
    // Same name in another directory is another entry.
    assert_eq!(cache.lookup(DIR + 1, "stdio.h"), Lookup::Unknown);
    // A create into the name: the backend records the new file, the negative is gone.
    cache.insert_dentry(DIR, "stdio.h", file(42));
    assert_eq!(cache.lookup(DIR, "stdio.h"), Lookup::Found(file(42)));
    cache.forget(DIR, "stdio.h");
    assert_eq!(cache.lookup(DIR, "stdio.h"), Lookup::Unknown);
    let s = cache.stats();
    assert_eq!((s.negative_hits, s.dentry_hits, s.dentry_misses), (1, 1, 3));
}

#[test]
fn negative_entries_expire_and_negtimeout_off_records_nothing() {
    let cache = loose();
    cache.insert_negative_ttl(DIR, "gone.h", Duration::from_millis(500));
    let now = Instant::now();
    assert_eq!(cache.lookup_at(DIR, "gone.h", now), Lookup::Missing);
    assert_eq!(
        cache.lookup_at(DIR, "gone.h", now + Duration::from_secs(1)),
        Lookup::Unknown
    );
    assert!(cache.is_empty(), "an expired entry is dropped when seen");

    let off = MountCache::new(1 << 20, NegTimeout::Off);
    off.insert_negative(DIR, "x");
    assert_eq!(off.lookup(DIR, "x"), Lookup::Unknown);

    let forever = MountCache::new(1 << 20, NegTimeout::UntilEvicted);
    forever.insert_negative(DIR, "x");
    assert_eq!(
        forever.lookup_at(
            DIR,
            "x",
            Instant::now() + Duration::from_secs(10 * 365 * 86_400)
        ),
        Lookup::Missing
    );
}

#[test]
fn symlink_targets_follow_the_link_they_came_from() {
    let cache = loose();
    let l = link(9, 3);
    cache.insert_dentry(DIR, "lib", l);
    cache.insert_symlink(l, Arc::from("../usr/lib"));
    assert_eq!(cache.symlink(l).as_deref(), Some("../usr/lib"));
    // The link changed on the server (new qid version): the target is not served.
    assert_eq!(cache.symlink(link(9, 4)), None);
    assert_eq!(cache.symlink(l), None, "and it was dropped");
    // Unlinking (or renaming over) the link drops its target with the dentry.
    cache.insert_symlink(l, Arc::from("../usr/lib"));
    cache.forget(DIR, "lib");
    assert_eq!(cache.symlink(l), None);
    let s = cache.stats();
    assert_eq!((s.symlink_hits, s.symlink_misses), (1, 3));
}

#[test]
fn attributes_are_cached_and_forgotten() {
    let cache = loose();
    assert!(cache.attr(42).is_none());
    cache.insert_attr(
        Rgetattr {
            qid: file(42),
            size: 1234,
            ..Default::default()
        },
        cache.asking(),
    );
    assert_eq!(cache.attr(42).unwrap().size, 1234);
    cache.insert_dentry(DIR, "f", file(42));
    cache.forget(DIR, "f");
    assert!(
        cache.attr(42).is_none(),
        "forgetting the dentry drops the attributes"
    );
    let s = cache.stats();
    assert_eq!((s.attr_hits, s.attr_misses), (1, 2));
}

fn checking(window: Duration) -> MountCache {
    loose().with_policy(Policy::new(CacheMode::LOOSE_MODE, Trust::For(window)))
}

#[test]
fn past_the_window_names_are_unconfirmed_until_their_directory_is_seen_unchanged() {
    let cache = checking(Duration::from_secs(1));
    let t0 = Instant::now();
    let seen = cache.asking().sent_at(t0).seen(5);
    cache.insert_dentry_seen(DIR, "a.h", file(1), seen);
    cache.insert_negative_seen(DIR, "b.h", seen);
    let at = |ms| t0 + Duration::from_millis(ms);
    // Young: believed.
    assert_eq!(cache.lookup_at(DIR, "a.h", at(500)), Lookup::Found(file(1)));
    assert_eq!(cache.lookup_at(DIR, "b.h", at(500)), Lookup::Missing);
    // Old: unconfirmed, with what a check has to find.
    let unconfirmed = |found| Lookup::Unconfirmed {
        found,
        dir_version: 5,
    };
    assert_eq!(
        cache.lookup_at(DIR, "a.h", at(2000)),
        unconfirmed(Some(file(1)))
    );
    assert_eq!(cache.lookup_at(DIR, "b.h", at(2000)), unconfirmed(None));
    // The directory seen at the same version: every name in it is believed again, for
    // a window from that sighting.
    cache.dir_seen(DIR, 5, cache.asking().sent_at(at(1500)));
    assert_eq!(
        cache.lookup_at(DIR, "a.h", at(2000)),
        Lookup::Found(file(1))
    );
    assert_eq!(cache.lookup_at(DIR, "b.h", at(2000)), Lookup::Missing);
    assert_eq!(
        cache.lookup_at(DIR, "a.h", at(2600)),
        unconfirmed(Some(file(1)))
    );
    // Seen at another version: nothing in it is believed.
    cache.dir_seen(DIR, 6, cache.asking().sent_at(at(2900)));
    assert_eq!(
        cache.lookup_at(DIR, "a.h", at(3000)),
        unconfirmed(Some(file(1)))
    );
    assert_eq!(cache.lookup_at(DIR, "b.h", at(3000)), unconfirmed(None));
    // Another directory's sighting confirms nothing here.
    cache.dir_seen(DIR + 1, 5, cache.asking().sent_at(at(2950)));
    assert_eq!(
        cache.lookup_at(DIR, "a.h", at(3000)),
        unconfirmed(Some(file(1)))
    );
}

#[test]
fn without_versions_only_age_decides_and_loose_trusts_forever() {
    // A server that sends version 0 (diod): sightings of 0 say nothing.
    let cache = checking(Duration::from_secs(1));
    let t0 = Instant::now();
    cache.insert_dentry_seen(DIR, "a.h", file(1), cache.asking().sent_at(t0).seen(0));
    cache.dir_seen(
        DIR,
        0,
        cache.asking().sent_at(t0 + Duration::from_millis(1500)),
    );
    assert_eq!(
        cache.lookup_at(DIR, "a.h", t0 + Duration::from_secs(2)),
        Lookup::Unconfirmed {
            found: Some(file(1)),
            dir_version: 0
        }
    );
    assert_eq!(cache.dir_version(DIR), 0, "nothing recorded");
    // Loose: believed forever, and no sighting is even kept.
    let loose = loose();
    loose.insert_dentry_seen(DIR, "a.h", file(1), loose.asking().sent_at(t0).seen(5));
    loose.dir_seen(DIR, 6, loose.asking().sent_at(t0));
    assert_eq!(loose.dir_version(DIR), 0);
    let much_later = t0 + Duration::from_secs(30 * 86_400);
    assert_eq!(
        loose.lookup_at(DIR, "a.h", much_later),
        Lookup::Found(file(1))
    );
}

#[test]
fn a_zero_window_believes_nothing_without_a_check() {
    let cache = checking(Duration::ZERO);
    cache.insert_dentry(DIR, "a.h", file(1));
    assert!(matches!(
        cache.lookup(DIR, "a.h"),
        Lookup::Unconfirmed { found: Some(_), .. }
    ));
    let attr = Rgetattr {
        qid: file(42),
        size: 10,
        ..Default::default()
    };
    cache.insert_attr(attr.clone(), cache.asking());
    assert!(cache.attr(42).is_none(), "attributes are fetched again");
    assert_eq!(
        cache.unconfirmed_attr(42).unwrap().size,
        10,
        "to compare with"
    );
    // A listing: unconfirmed, with its directory version.
    cache.insert_readdir(DIR, Arc::new(Vec::new()), cache.asking().seen(9));
    assert!(cache.readdir(DIR).is_none());
    assert_eq!(cache.unconfirmed_readdir(DIR).map(|(_, v)| v), Some(9));
    // A symlink target stands while the link's version does; without versions, not
    // past the window.
    cache.insert_symlink(link(9, 3), Arc::from("a"));
    assert_eq!(cache.symlink(link(9, 3)).as_deref(), Some("a"));
    cache.insert_symlink(link(10, 0), Arc::from("b"));
    assert_eq!(cache.symlink(link(10, 0)), None);
    // The same within a window.
    let hour = checking(Duration::from_secs(3600));
    hour.insert_attr(attr, hour.asking());
    assert!(hour.attr(42).is_some());
    hour.insert_symlink(link(10, 0), Arc::from("b"));
    assert_eq!(hour.symlink(link(10, 0)).as_deref(), Some("b"));
}

#[test]
fn cache_size_is_a_hard_bound_and_hot_entries_survive_pressure() {
    let cache = MountCache::new(64 * 1024, NegTimeout::UntilEvicted);
    cache.insert_dentry(DIR, "hot.h", file(1));
    for i in 0..20_000u64 {
        cache.insert_negative(DIR, &format!("cold-{i}.h"));
        if i % 16 == 0 {
            // Keep touching the hot entry, as a compiler does with a common header.
            assert_eq!(cache.lookup(DIR, "hot.h"), Lookup::Found(file(1)));
        }
        assert!(
            cache.bytes() <= cache.capacity(),
            "{} > {}",
            cache.bytes(),
            cache.capacity()
        );
    }
    assert!(cache.len() < 20_000, "entries were evicted");
    assert_eq!(cache.lookup(DIR, "hot.h"), Lookup::Found(file(1)));
}

#[test]
fn shared_by_threads() {
    let cache = Arc::new(loose());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for i in 0..2_000u64 {
                    let name = format!("n{}", i % 100);
                    if i % 3 == t % 3 {
                        cache.insert_negative(t, &name);
                    } else {
                        cache.insert_dentry(t, &name, file(i));
                    }
                    assert_ne!(cache.lookup(t, &name), Lookup::Unknown);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_cached_page_keeps_only_itself_alive_not_the_reply_it_came_in() {
    use super::PAGE_SIZE;
    let cache = MountCache::new(
        (64 * PAGE_SIZE) as u64,
        NegTimeout::For(Duration::from_secs(1)),
    );
    // Replies of 8 pages each, as a read of 512 KiB brings them; every page cached.
    let mut ranges = Vec::new();
    for reply_no in 0..16u64 {
        let reply = bytes::Bytes::from(vec![reply_no as u8; 8 * PAGE_SIZE]);
        let start = reply.as_ptr() as usize;
        ranges.push(start..start + reply.len());
        for i in 0..8 {
            let page = reply.slice(i * PAGE_SIZE..(i + 1) * PAGE_SIZE);
            cache.insert_page(1, 1, 0, reply_no * 8 + i as u64, page);
        }
    }
    // What is held is charged: never more than the bound, and each page held is
    // memory of its own, not a view into one of the replies (which are gone).
    assert!(cache.bytes() <= cache.capacity());
    let held: Vec<bytes::Bytes> = (0..128).filter_map(|i| cache.page(1, 1, 0, i)).collect();
    assert!(
        !held.is_empty() && held.len() <= 64,
        "{} pages held",
        held.len()
    );
    for page in &held {
        let at = page.as_ptr() as usize;
        assert!(
            ranges.iter().all(|r| !r.contains(&at)),
            "a cached page points into a server reply"
        );
        assert_eq!(page.len(), PAGE_SIZE);
    }
    let charged = cache.bytes();
    assert!(
        charged >= (held.len() * PAGE_SIZE) as u64,
        "charged {charged}"
    );
    // Buffers let go by evicted pages wait for reuse, a bounded few of them.
    let waiting = cache.pages.waiting();
    assert!(waiting > 0 && waiting <= 64, "{waiting} buffers kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_runtime_pages_are_moved_out_of_their_replies_in_the_background() {
    use super::PAGE_SIZE;
    let cache = MountCache::new(
        (64 * PAGE_SIZE) as u64,
        NegTimeout::For(Duration::from_secs(1)),
    );
    let reply = bytes::Bytes::from(vec![7u8; 8 * PAGE_SIZE]);
    let range = reply.as_ptr() as usize..reply.as_ptr() as usize + reply.len();
    for i in 0..8 {
        cache.insert_page(
            2,
            1,
            0,
            i,
            reply.slice(i as usize * PAGE_SIZE..(i as usize + 1) * PAGE_SIZE),
        );
    }
    // Served at once (a slice until moved), then moved: bounded wait for the mover.
    assert!(cache.page(2, 1, 0, 3).is_some());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let moved = (0..8).all(|i| {
            cache.page(2, 1, 0, i).is_some_and(|p| {
                !range.contains(&(p.as_ptr() as usize)) && p[..] == reply[..PAGE_SIZE]
            })
        });
        if moved {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pages still point into their reply"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn a_complete_listing_answers_present_and_missing_and_follows_local_changes() {
    let cache = loose();
    let names = [("a.h", file(10)), ("b.h", file(11))]
        .into_iter()
        .map(|(n, q)| (Box::<str>::from(n), q))
        .collect();
    cache.insert_complete(DIR, names, cache.asking().seen(0));
    assert_eq!(cache.lookup(DIR, "a.h"), Lookup::Found(file(10)));
    assert_eq!(cache.lookup(DIR, "zzz.h"), Lookup::Missing);
    assert_eq!(
        cache.lookup(DIR + 1, "a.h"),
        Lookup::Unknown,
        "another directory"
    );
    cache.complete_added(DIR, "c.h", file(12));
    cache.complete_removed(DIR, "a.h");
    assert_eq!(cache.lookup(DIR, "c.h"), Lookup::Found(file(12)));
    assert_eq!(cache.lookup(DIR, "a.h"), Lookup::Missing);
    // A dentry of its own still wins over the listing.
    cache.insert_dentry(DIR, "b.h", file(99));
    assert_eq!(cache.lookup(DIR, "b.h"), Lookup::Found(file(99)));
    let s = cache.stats();
    assert_eq!((s.listings_read, s.listing_hits), (1, 4));
    cache.complete_forget(DIR);
    assert_eq!(cache.lookup(DIR, "c.h"), Lookup::Unknown);
}

#[test]
fn missing_from_a_listing_lasts_no_longer_than_negtimeout_and_trust_is_the_mount_s() {
    let short = MountCache::new(1 << 20, NegTimeout::For(Duration::from_millis(30)));
    let one = std::iter::once((Box::<str>::from("a.h"), file(10))).collect();
    short.insert_complete(DIR, one, short.asking().seen(0));
    assert_eq!(short.lookup(DIR, "x.h"), Lookup::Missing);
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(
        short.lookup(DIR, "x.h"),
        Lookup::Unknown,
        "negtimeout passed"
    );
    assert_eq!(short.lookup(DIR, "a.h"), Lookup::Found(file(10)));

    let windowed = checking(Duration::from_millis(30));
    let one = std::iter::once((Box::<str>::from("a.h"), file(10))).collect();
    windowed.insert_complete(DIR, one, windowed.asking().seen(5));
    assert_eq!(windowed.lookup(DIR, "a.h"), Lookup::Found(file(10)));
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(
        windowed.lookup(DIR, "a.h"),
        Lookup::Unconfirmed {
            found: Some(file(10)),
            dir_version: 5
        }
    );
    // The directory seen at its version again: the whole listing is believed again.
    windowed.dir_seen(DIR, 5, windowed.asking());
    assert_eq!(windowed.lookup(DIR, "a.h"), Lookup::Found(file(10)));
    // ...and at another, it is out of date.
    windowed.complete_seen_at(DIR, 6);
    assert_eq!(windowed.lookup(DIR, "a.h"), Lookup::Unknown);
}

#[test]
fn a_directory_too_large_is_only_marked() {
    let cache = loose();
    let many = (0..=super::MAX_COMPLETE as u64)
        .map(|i| (Box::<str>::from(format!("f{i}")), file(100 + i)))
        .collect();
    cache.insert_complete(DIR, many, cache.asking().seen(0));
    assert!(cache.complete_known(DIR));
    assert_eq!(cache.lookup(DIR, "f1"), Lookup::Unknown);
    assert!(
        cache.bytes() < 4096,
        "{} bytes kept for a marker",
        cache.bytes()
    );
}

#[test]
fn a_snapshot_keeps_only_what_holds_at_the_version_a_directory_was_last_seen_at() {
    let root = tempfile::tempdir().unwrap();
    let store = crate::fscache::Store::open(root.path(), "t", 1 << 20).unwrap();
    // Loose (trusted forever), yet versions are recorded: the store needs them.
    let cache = MountCache::new(1 << 20, NegTimeout::UntilEvicted).persisting(Arc::new(store));
    cache.insert_dentry_seen(DIR, "old.h", file(10), cache.asking().seen(4));
    cache.dir_seen(DIR, 5, cache.asking());
    cache.insert_negative_seen(DIR, "missing.h", cache.asking().seen(5));
    cache.insert_dentry_seen(DIR, "new.h", file(11), cache.asking().seen(5));
    // Made through the mount: under no version the server gave.
    cache.insert_dentry(DIR, "made.h", file(12));
    // A directory whose version was never seen.
    cache.insert_dentry_seen(8, "x.h", file(13), cache.asking().seen(7));
    // A link read at version 3 through a node a listing gave (version 0).
    cache.insert_symlink_read(link(20, 0), "x.h".into(), 3, cache.asking());
    cache.insert_symlink(link(21, 0), "y.h".into());

    let snap = cache.snapshot();
    let dir = &snap.dirs[&DIR];
    assert_eq!(dir.version, 5);
    let mut names: Vec<_> = dir.names.iter().map(|(n, q)| (n.to_string(), *q)).collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        names,
        [("missing.h".into(), None), ("new.h".into(), Some(file(11)))]
    );
    assert!(!snap.dirs.contains_key(&8));
    assert_eq!(snap.links.len(), 1);
    assert_eq!(snap.links[&20].version, 3);
}

#[test]
fn an_answer_asked_for_before_a_change_through_the_mount_never_lands_over_it() {
    let cache = loose();
    // A's walk leaves; B creates the name; A's "missing" arrives.
    let walk = cache.asking();
    cache.insert_dentry(DIR, "x.h", file(1));
    cache.insert_negative_seen(DIR, "x.h", walk.seen(0));
    assert_eq!(cache.lookup(DIR, "x.h"), Lookup::Found(file(1)));
    // Nor does a listing read meanwhile hide it, or one of another name re-add it.
    let listing = cache.asking();
    cache.insert_complete(DIR, Default::default(), cache.asking().seen(0));
    cache.complete_added(DIR, "y.h", file(2));
    let stale = std::iter::once((Box::<str>::from("z.h"), file(3))).collect();
    cache.insert_complete(DIR, stale, listing.seen(0));
    assert_eq!(cache.lookup(DIR, "y.h"), Lookup::Found(file(2)));
    assert_eq!(cache.lookup(DIR, "z.h"), Lookup::Missing);
    // Attributes fetched before a write are not kept after it.
    let stat = cache.asking();
    cache.forget_attr(42);
    let old = Rgetattr {
        qid: file(42),
        size: 1,
        ..Default::default()
    };
    cache.insert_attr(old.clone(), stat);
    assert!(cache.attr(42).is_none());
    // What is asked for after the change is stored as usual, and a change to another
    // directory stops nothing here.
    let after = cache.asking();
    cache.forget(DIR + 1, "other.h");
    cache.insert_negative_seen(DIR, "w.h", after.seen(0));
    cache.insert_attr(old, after);
    assert_eq!(cache.lookup(DIR, "w.h"), Lookup::Missing);
    assert_eq!(cache.attr(42).map(|a| a.size), Some(1));
}

#[test]
fn concurrent_changes_to_one_complete_listing_all_land() {
    let cache = Arc::new(loose());
    cache.insert_complete(DIR, Default::default(), cache.asking().seen(0));
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    cache.complete_added(DIR, &format!("{t}-{i}.o"), file(1000 * t + i));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    for t in 0..4u64 {
        for i in 0..200 {
            let name = format!("{t}-{i}.o");
            assert_eq!(
                cache.peek_lookup(DIR, &name),
                Lookup::Found(file(1000 * t + i)),
                "{name} lost"
            );
        }
    }
}

/// Two mounts of a server that promises odd versions of paths below 1000 never change
/// (as a worker's input roots do): what one learns, the other answers with no request,
/// and only what it learnt at a fixed version, about a node it never changed itself.
#[test]
fn mounts_sharing_a_cache_answer_what_another_learnt_at_a_fixed_version_only() {
    use super::SharedCache;
    let shared = Arc::new(SharedCache::new(1 << 20, |path, version| {
        path < 1000 && version % 2 == 1
    }));
    let mount = || loose().sharing(Some(shared.clone()));
    let dir = |version| Qid {
        ty: qid::DIR,
        version,
        path: DIR,
    };
    let (a, b) = (mount(), mount());
    a.insert_dentry_seen(DIR, "a.h", file(42), a.asking().seen(3));
    a.insert_negative_seen(DIR, "gone.h", a.asking().seen(3));
    a.insert_negative_seen(DIR, "changed.h", a.asking().seen(4)); // not fixed
    a.insert_attr(
        Rgetattr {
            qid: file(42),
            size: 99,
            ..Rgetattr::default()
        },
        a.asking(),
    );
    a.insert_symlink_read(link(43, 1), Arc::from("a.h"), 1, a.asking());
    a.insert_readdir(
        DIR,
        Arc::new(vec![crate::node::Entry {
            name: "a.h".into(),
            kind: crate::node::Kind::File,
            id: 42,
            cookie: 1,
        }]),
        a.asking().seen(3),
    );

    assert_eq!(b.shared_lookup(dir(3), "a.h"), Some(Some(file(42))));
    assert_eq!(
        b.lookup(DIR, "a.h"),
        Lookup::Found(file(42)),
        "kept by b too"
    );
    assert_eq!(b.shared_lookup(dir(3), "gone.h"), Some(None));
    assert_eq!(b.shared_lookup(dir(4), "changed.h"), None);
    assert_eq!(b.shared_lookup(dir(5), "a.h"), None, "another version");
    assert_eq!(b.shared_attr(file(42)).map(|a| a.size), Some(99));
    assert_eq!(b.shared_link(link(43, 1)).as_deref(), Some("a.h"));
    assert_eq!(b.shared_listing(dir(3)).map(|l| l.len()), Some(1));
    assert_eq!(b.stats().shared_metadata_hits, 5);

    // A mount that changed the directory, or wrote the file, asks the server.
    let c = mount();
    c.forget(DIR, "new.h");
    assert_eq!(c.shared_lookup(dir(3), "a.h"), None);
    assert_eq!(c.shared_listing(dir(3)), None);
    c.mark_written(42);
    assert_eq!(c.shared_attr(file(42)), None);
    // A mount without the shared cache has none of it.
    assert_eq!(loose().shared_lookup(dir(3), "a.h"), None);
}
