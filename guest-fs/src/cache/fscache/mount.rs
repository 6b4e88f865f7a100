//! The mount cache's side of `cache=fscache` (the store itself is this module's
//! parent): what of the cache goes to disk, and taking records from disk back in once
//! the server has confirmed them (the 9p backend's `store` module asks it).
//!
//! What goes ([`MountCache::snapshot`]): a directory's dentries (positive and
//! negative) and complete listing learnt under the version the directory was last
//! seen at in this process (answers learnt under an older one, or after a change
//! through the mount, are not known to hold at any version); symlink targets and
//! attributes with a qid version (not 0); pages as they are fetched, of files not
//! changed through this mount.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use wasm9p_proto::{Qid, Rgetattr};

use crate::cache::{Asked, Entry, Key, MountCache, Seen};
use crate::fscache::{DirRecord, FileRecord, LinkRecord, PageKey, Records, Store};
use crate::node::{self, Kind};

impl MountCache {
    /// The same cache, keeping what it learns in `store` too.
    pub fn persisting(mut self, store: Arc<Store>) -> MountCache {
        self.persist = Some(store);
        self
    }

    /// The store this cache persists to, if any.
    pub fn persistent_store(&self) -> Option<&Arc<Store>> {
        self.persist.as_ref()
    }

    /// The version directory `dir` was seen at by this process, if still believed,
    /// and when the request that saw it was sent.
    pub fn dir_version_believed(&self, dir: u64) -> Option<(u32, Asked)> {
        match self.store.get(&Key::DirVersion(dir)) {
            Some(Entry::DirVersion { version, asked }) if self.young(asked.at, Instant::now()) => {
                Some((version, asked))
            }
            _ => None,
        }
    }

    /// Takes in a directory's record from disk, confirmed by the server at its
    /// version by a request made when `asked` (nothing, if the directory changed
    /// through this mount since). A complete record answers lookups and readdir.
    pub fn load_dir(&self, dir: u64, record: DirRecord, asked: Asked) {
        self.answered(asked, dir, || self.put_record(dir, record, asked));
    }

    fn put_record(&self, dir: u64, record: DirRecord, asked: Asked) {
        let seen = asked.seen(record.version);
        if record.complete {
            let names: HashMap<Box<str>, Qid> = record
                .names
                .into_iter()
                .filter_map(|(name, qid)| Some((name, qid?)))
                .collect();
            let mut entries: Vec<node::Entry> = names
                .iter()
                .map(|(name, qid)| node::Entry {
                    kind: Kind::of_qid(qid),
                    id: qid.path,
                    name: name.to_string(),
                    cookie: 0,
                })
                .collect();
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            for (i, e) in entries.iter_mut().enumerate() {
                e.cookie = i as u64 + 1;
            }
            self.put_readdir(dir, Arc::new(entries), seen);
            // Not counted as a listing read.
            self.put_complete(dir, names, seen);
            return;
        }
        for (name, qid) in record.names {
            match qid {
                Some(qid) => self.put_dentry(dir, &name, qid, seen),
                None => self.put_negative_seen(dir, &name, seen),
            }
        }
    }

    /// The target of symlink `qid` kept on disk (the qid comes from a confirmed
    /// dentry, and a link's target only changes with its qid): cached, and returned.
    pub fn stored_symlink(&self, qid: Qid) -> Option<Arc<str>> {
        let store = self.persist.as_ref()?;
        let target: Arc<str> = store.link(qid.path, qid.version)?.into();
        store.count_hit();
        self.insert_symlink(qid, target.clone());
        Some(target)
    }

    /// The attributes kept on disk of the file `fresh` names, if the server's qid for
    /// it (`fresh`, from a request made when `asked`) is the one they were fetched
    /// with: cached as of then, and returned. Attributes out of date are forgotten.
    pub fn stored_attr(&self, fresh: Qid, asked: Asked) -> Option<Arc<Rgetattr>> {
        let store = self.persist.as_ref()?;
        let attr = store.file(fresh.path)?.attr;
        if attr.qid != fresh || fresh.version == 0 {
            store.file_out_of_date(fresh.path);
            return None;
        }
        store.count_hit();
        let attr = Arc::new(attr);
        self.confirm_attr(attr.clone(), asked);
        Some(attr)
    }

    /// A page of generation 0 (not changed through this mount) from disk.
    pub(in crate::cache) fn stored_page(&self, key: PageKey) -> Option<bytes::Bytes> {
        let data = self.persist.as_ref()?.read_page(key)?;
        Some(bytes::Bytes::from(data))
    }

    /// Keeps a page of generation 0 on disk, off the caller's path when a runtime is
    /// there to take it.
    pub(in crate::cache) fn persist_page(&self, key: PageKey, data: bytes::Bytes) {
        let Some(store) = self.persist.clone() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let queued = store.queue_page();
                drop(runtime.spawn_blocking(move || queued.write(key, &data)));
            }
            Err(_) => store.write_page(key, &data),
        }
    }

    /// What of this cache can be checked by a later process (see the module docs).
    pub fn snapshot(&self) -> Records {
        let used = crate::fscache::now_secs();
        let entries: Vec<(Key, Entry)> = self.store.iter().collect();
        // Files the server let this mount open for reading, at the version they had.
        let readable: std::collections::HashSet<(u64, u32)> = entries
            .iter()
            .filter_map(|(key, entry)| match (key, entry) {
                (
                    Key::Readable {
                        path,
                        generation: 0,
                        ..
                    },
                    Entry::Readable { pages, .. },
                ) => Some((*path, *pages)),
                _ => None,
            })
            .collect();
        let versions: HashMap<u64, u32> = entries
            .iter()
            .filter_map(|(key, entry)| match (key, entry) {
                (Key::DirVersion(dir), Entry::DirVersion { version, .. }) => Some((*dir, *version)),
                _ => None,
            })
            .collect();
        // Learnt under the version the directory was last seen at.
        let current = |dir: u64, seen: &Seen| {
            seen.dir_version != 0 && versions.get(&dir) == Some(&seen.dir_version)
        };
        let mut records = Records::default();
        let now = Instant::now();
        for (key, entry) in entries {
            match (key, entry) {
                (Key::Dentry { dir, name }, Entry::Positive { qid, seen })
                    if current(dir, &seen) =>
                {
                    dir_record(&mut records, dir, seen.dir_version, used)
                        .names
                        .insert(name, Some(qid));
                }
                (Key::Dentry { dir, name }, Entry::Negative { expires, seen })
                    if current(dir, &seen) && expires.is_none_or(|t| now < t) =>
                {
                    dir_record(&mut records, dir, seen.dir_version, used)
                        .names
                        .entry(name)
                        .or_insert(None);
                }
                (
                    Key::Complete(dir),
                    Entry::Complete {
                        names: Some(names),
                        seen,
                    },
                ) if current(dir, &seen) => {
                    let record = dir_record(&mut records, dir, seen.dir_version, used);
                    record.complete = true;
                    record
                        .names
                        .extend(names.iter().map(|(n, q)| (n.clone(), Some(*q))));
                }
                (Key::Readdir(dir), Entry::Listing { entries, seen }) if current(dir, &seen) => {
                    // A listing is every name (a readdir entry's qid has no version).
                    let record = dir_record(&mut records, dir, seen.dir_version, used);
                    record.complete = true;
                    record.names.extend(entries.iter().map(|e| {
                        let qid = Qid {
                            ty: e.kind.qid_type(),
                            version: 0,
                            path: e.id,
                        };
                        (Box::from(e.name.as_str()), Some(qid))
                    }));
                }
                (
                    Key::Symlink(path),
                    Entry::Symlink {
                        read_at, target, ..
                    },
                ) if read_at != 0 => {
                    records.links.insert(
                        path,
                        LinkRecord {
                            version: read_at,
                            target: target.as_ref().into(),
                            used,
                        },
                    );
                }
                (Key::Attr(path), Entry::Attr { attr, .. })
                    if attr.qid.version != 0 && self.generation(path) == 0 =>
                {
                    records.files.insert(
                        path,
                        FileRecord {
                            readable: readable.contains(&(path, attr.qid.version)),
                            attr: (*attr).clone(),
                            used,
                        },
                    );
                }
                _ => {}
            }
        }
        // A complete listing's own names are all there is: a negative dentry there
        // (learnt before it) says nothing more.
        for record in records.dirs.values_mut().filter(|r| r.complete) {
            record.names.retain(|_, qid| qid.is_some());
        }
        records
    }

    /// Whether directory versions are recorded: when answers are checked by them, or
    /// kept on disk.
    pub(in crate::cache) fn records_versions(&self) -> bool {
        self.policy.checks() || self.persist.is_some()
    }
}

fn dir_record(records: &mut Records, dir: u64, version: u32, used: u64) -> &mut DirRecord {
    records.dirs.entry(dir).or_insert_with(|| DirRecord {
        version,
        used,
        ..DirRecord::default()
    })
}
