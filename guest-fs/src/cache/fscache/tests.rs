use std::collections::HashMap;

use wasm9p_proto::Qid;

use super::*;

fn qid(path: u64) -> Qid {
    Qid {
        ty: 0,
        version: 1,
        path,
    }
}

fn dir_knowing(version: u32, names: &[(&str, Option<u64>)]) -> DirRecord {
    DirRecord {
        version,
        names: names
            .iter()
            .map(|(n, q)| (Box::from(*n), q.map(qid)))
            .collect(),
        complete: false,
        used: now_secs(),
    }
}

fn records_with_dir(dir: u64, record: DirRecord) -> Records {
    Records {
        dirs: HashMap::from([(dir, record)]),
        ..Records::default()
    }
}

#[test]
fn two_stores_on_one_directory_merge_what_each_learnt() {
    let root = tempfile::tempdir().unwrap();
    let a = Store::open(root.path(), "export", 1 << 20).unwrap();
    let b = Store::open(root.path(), "export", 1 << 20).unwrap();
    // Both learnt names of directory 5 at version 3; b also of directory 6.
    a.flush(records_with_dir(
        5,
        dir_knowing(3, &[("a.h", Some(10)), ("x.h", None)]),
    ))
    .unwrap();
    let mut theirs = records_with_dir(5, dir_knowing(3, &[("b.h", Some(11))]));
    theirs.dirs.insert(6, dir_knowing(2, &[("c.h", None)]));
    b.flush(theirs).unwrap();

    let reopened = Store::open(root.path(), "export", 1 << 20).unwrap();
    let five = reopened.take_dir(5).unwrap();
    assert_eq!(five.version, 3);
    let mut names: Vec<_> = five.names.keys().map(|n| n.to_string()).collect();
    names.sort();
    assert_eq!(names, ["a.h", "b.h", "x.h"]);
    assert!(reopened.take_dir(6).is_some());
    // Tried once per process; still said to be kept, for whoever looks the directory
    // up while its record is being taken in (they wait for it).
    assert!(reopened.take_dir(5).is_none());
    assert!(reopened.has_dir(5) && reopened.has_dir(6));
    assert!(!reopened.has_dir(7));

    // Directory 5 at a new version: the old names go, they are of another listing.
    reopened
        .flush(records_with_dir(5, dir_knowing(4, &[("d.h", Some(12))])))
        .unwrap();
    let again = Store::open(root.path(), "export", 1 << 20).unwrap();
    let five = again.take_dir(5).unwrap();
    assert_eq!((five.version, five.names.len()), (4, 1));
}

#[test]
fn a_directory_found_out_of_date_is_dropped_from_disk() {
    let root = tempfile::tempdir().unwrap();
    let first = Store::open(root.path(), "t", 1 << 20).unwrap();
    first
        .flush(records_with_dir(5, dir_knowing(3, &[("a.h", None)])))
        .unwrap();
    let second = Store::open(root.path(), "t", 1 << 20).unwrap();
    assert!(second.take_dir(5).is_some());
    second.dir_out_of_date(5, 3);
    second.flush(Records::default()).unwrap();
    assert_eq!(second.stats().misses, 1);
    assert!(Store::open(root.path(), "t", 1 << 20)
        .unwrap()
        .take_dir(5)
        .is_none());
}

#[test]
fn pages_stay_within_the_bound_least_recently_used_first() {
    let root = tempfile::tempdir().unwrap();
    let bound = 256 << 10;
    let store = Store::open(root.path(), "t", bound).unwrap();
    let page = vec![7u8; 64 << 10];
    let key = |index| PageKey {
        path: 1,
        version: 1,
        index,
    };
    let write = |index| {
        // File times are as coarse as the kernel's clock tick: apart, they order.
        std::thread::sleep(std::time::Duration::from_millis(10));
        store.write_page(key(index), &page);
    };
    for index in 0..12 {
        write(index);
        assert!(store.disk_bytes() <= bound, "{} bytes", store.disk_bytes());
    }
    let on_disk = |index| pages::exists(&store.pages, key(index));
    assert!(on_disk(11) && on_disk(10) && !on_disk(0));
    // Used now, page 10 outlives page 11, written after it.
    assert!(store.read_page(key(10)).is_some());
    write(12);
    write(13);
    assert!(on_disk(10), "the page just used went");
    assert!(!on_disk(11));
    store.flush(Records::default()).unwrap();
    assert!(store.disk_bytes() <= bound);
    assert_eq!(store.stats().bytes, store.disk_bytes());
}

#[test]
fn a_store_that_cannot_be_written_is_refused_at_open() {
    let root = tempfile::tempdir().unwrap();
    // A file where the store's directory would be: nothing can be made there, even
    // by root (who ignores permission bits).
    let blocked = root.path().join("file");
    fs::write(&blocked, "").unwrap();
    assert!(Store::open(&blocked, "t", 1 << 20).is_err());
}

#[test]
fn stores_are_listed_by_tag_and_cleared_one_or_all() {
    let root = tempfile::tempdir().unwrap();
    for tag in ["tcp:127.0.0.1:564 /src", "sysroot"] {
        let s = Store::open(root.path(), tag, 1 << 20).unwrap();
        s.flush(records_with_dir(5, dir_knowing(3, &[("a.h", None)])))
            .unwrap();
    }
    let listed = stores(root.path()).unwrap();
    let tags: Vec<_> = listed.iter().map(|s| s.tag.as_str()).collect();
    assert_eq!(tags, ["sysroot", "tcp:127.0.0.1:564 /src"]);
    assert!(listed.iter().all(|s| s.records == 1 && s.bytes > 0));
    let gone = clear(root.path(), Some("sysroot")).unwrap();
    assert_eq!(gone.len(), 1);
    assert_eq!(stores(root.path()).unwrap().len(), 1);
    clear(root.path(), None).unwrap();
    assert!(stores(root.path()).unwrap().is_empty());
    assert!(stores(&root.path().join("absent")).unwrap().is_empty());
}

#[test]
fn store_names_are_safe_and_distinct() {
    assert_ne!(store_name("a/b"), store_name("a_b"));
    assert!(!store_name("../../etc").contains('/'));
    assert!(store_name(&"x".repeat(500)).len() < 64);
}

#[test]
fn a_process_that_learnt_nothing_new_leaves_meta_as_it_was() {
    let root = tempfile::tempdir().unwrap();
    let first = Store::open(root.path(), "t", 1 << 20).unwrap();
    first
        .flush(records_with_dir(
            5,
            dir_knowing(3, &[("a.h", None), ("b.h", Some(9))]),
        ))
        .unwrap();
    let meta = first.dir().join("meta");
    let written = fs::metadata(&meta).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    // A later process knows part of it (what it used): nothing to write.
    let warm = Store::open(root.path(), "t", 1 << 20).unwrap();
    warm.flush(records_with_dir(5, dir_knowing(3, &[("a.h", None)])))
        .unwrap();
    assert_eq!(fs::metadata(&meta).unwrap().modified().unwrap(), written);
    // One new name is worth writing.
    warm.flush(records_with_dir(5, dir_knowing(3, &[("c.h", None)])))
        .unwrap();
    assert_ne!(fs::metadata(&meta).unwrap().modified().unwrap(), written);
    let names = Store::open(root.path(), "t", 1 << 20)
        .unwrap()
        .take_dir(5)
        .unwrap()
        .names;
    assert_eq!(names.len(), 3);
}

#[test]
fn a_flush_does_not_wait_for_a_page_whose_writer_never_ran() {
    let root = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(root.path(), "t", 1 << 20).unwrap());
    // Queued, then dropped unwritten: as a task of a runtime shut down first.
    drop(store.queue_page());
    let start = std::time::Instant::now();
    store
        .flush(records_with_dir(5, dir_knowing(3, &[("a.h", None)])))
        .unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}
