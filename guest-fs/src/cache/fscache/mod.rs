//! `cache=fscache`: a mount's cache kept on local disk, so that the next process
//! mounting the same export starts warm.
//!
//! # What is kept
//! Everything `loose` keeps that can be checked later: file pages keyed by (qid path,
//! qid version; for a server without versions, the content stamp of size, mtime and
//! ctime), files' attributes (with their qid), positive and negative dentries and
//! complete listings keyed by their directory's (qid path, qid version), and symlink
//! targets keyed by the link's qid. Answers learnt under version 0 (diod) are not kept,
//! except pages, whose stamp comes from attributes fetched at open.
//!
//! # Coherence
//! Nothing read from disk is used before the server has confirmed it in this process:
//! a directory's names once its version has been seen unchanged (a walk through it, or
//! one check: a Twalk that probes a name below it, which creates no fid), a file's
//! attributes once its qid is (one probing Twalk to it), its pages only at the version
//! an open got from the server, a symlink's target only for the link qid a confirmed
//! dentry gives. After that, answers are believed as the mount's trust says, like any
//! other.
//!
//! The probes go together, ahead of use ([`ahead`]): when the mount is made (a host
//! starts them then), else the first time the mount reaches for its store, it sends at
//! once one probe per file and symlink kept and per directory with nothing kept below
//! it (up to [`MAX_AHEAD`], the most recently used first), and takes in what they
//! confirm. Over a link with a round trip of milliseconds, a fresh process then waits
//! one round trip for its confirmations rather than one per file. What the burst leaves
//! out (records not reachable by name from the root, or over its bound) is probed when
//! used, as above.
//!
//! # On disk
//! A store per export (`cachetag=NAME`, or the server address and aname) under
//! `fscache_dir` (default `$WASM9P_FSCACHE_DIR`, `$XDG_CACHE_HOME/wasm9p/fscache`,
//! `~/.cache/wasm9p/fscache`), made private (0700):
//! - `tag`: the tag, as given;
//! - `meta`: every record but pages ([`records`]), each framed with a CRC; rewritten
//!   whole (temporary file, fsync, rename) when a mount lets go or is asked to
//!   ([`Store::flush`]), merged under the store's lock with what other processes wrote
//!   meanwhile;
//! - `pages/`: a file per page (the `pages` module), written as pages are fetched;
//! - `lock`: an flock serializing `meta` merges and the size bound's sweeps.
//!
//! Plain files rather than an embedded database: every write is an atomic rename, so a
//! crash leaves the old file or the new one, and a torn or flipped one is caught by its
//! CRC; processes share pages without any lock; the LRU order is the file system's
//! own mtimes. The price is a `meta` file rewritten whole, which is small (names and
//! attributes: about 100 bytes a record).
//!
//! # Where each part lives
//! This module is the one home of the persistent cache: the store on disk (here,
//! [`records`], `pages`), the burst of confirmations ([`ahead`]), and the mount
//! cache's side (`mount`: what of the cache is written, and taking confirmed records
//! back in). It sits inside [`crate::cache`] because it reads and fills the cache's
//! own entries; it is re-exported as `wasm9p_guest_fs::fscache`. The one piece outside
//! is the 9p backend's `store` module, which sends the probes (it needs the mount's
//! walks) and hands what they confirm here.
//!
//! # The bound
//! `fscache_size` bytes across processes: at every flush (which first waits for the
//! pages still being written), and whenever a page written takes the store past it,
//! the least recently used pages and records go until the store is within nine
//! tenths of it.

pub mod ahead;
mod mount;
mod pages;
pub mod records;

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

pub use pages::PageKey;
pub use records::{DirRecord, FileRecord, LinkRecord, Records};

/// Most probes sent ahead of use (see the module docs). Over loopback
/// tcp to our server the build workload's 111 are answered in 2.4-3.8 ms (about 25 us
/// each, in flight together), so a store that knows far more than this process will
/// use costs it at most about 60 ms.
pub const MAX_AHEAD: usize = 2048;

/// The options' defaults, kept with the options (they sit below the store).
pub use crate::mount_options::{default_dir, DEFAULT_FSCACHE_SIZE};

/// The directory name of the store for `tag`: readable, and unique by a hash.
fn store_name(tag: &str) -> String {
    let readable: String = tag
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => c,
            _ => '_',
        })
        .take(40)
        .collect();
    // FNV-1a: stable across builds and machines, unlike std's hasher.
    let hash = tag.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    format!("{readable}-{hash:016x}")
}

pub(crate) fn now_secs() -> u64 {
    unix_secs(SystemTime::now())
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// A snapshot of a store's counters, for `--stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Records and pages read from disk and used (confirmed by the server).
    pub hits: u64,
    /// Records found out of date, and pages looked for and not on disk.
    pub misses: u64,
    /// Requests sent to confirm records read from disk.
    pub validations: u64,
    /// Of those, the ones sent together ahead of use ([`ahead`]).
    pub validated_ahead: u64,
    /// Bytes the store takes on disk (as of its last write or sweep).
    pub bytes: u64,
}

/// One export's store, opened by a mount.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    pages: PathBuf,
    bound: u64,
    /// What was on disk at mount, for lookups; a directory's record is taken out once
    /// tried (it is then in memory, or out of date).
    index: Mutex<Records>,
    /// Directories whose records were taken out of `index` (changed under its lock):
    /// a lookup that comes while one is being taken in waits for it, rather than
    /// asking the server what the record answers.
    taken: Mutex<std::collections::HashSet<u64>>,
    /// Directories found changed, with the version their records had: dropped from
    /// disk at the next flush.
    stale: Mutex<HashMap<u64, u32>>,
    hits: AtomicU64,
    misses: AtomicU64,
    validations: AtomicU64,
    validated_ahead: AtomicU64,
    bytes: AtomicU64,
    /// A write failed (the disk is full or went read-only): said once, and nothing is
    /// written any more.
    broken: AtomicBool,
    /// What `meta` held at open, or after this process's last flush: a flush that
    /// would add nothing to it (but times of use less than an hour newer) writes
    /// nothing, so a warm process leaves the store as it found it.
    on_disk: Mutex<Records>,
    /// Pages handed to [`Store::page_queued`] and not written yet: a flush waits for
    /// them, so that the bound holds once a process is done.
    queued: Mutex<usize>,
    written: std::sync::Condvar,
}

impl Store {
    /// Opens (making it if needed) the store for `tag` under `root`, bounded to
    /// `bound` bytes. Fails when the store cannot be written (a read-only directory):
    /// the mount then keeps its cache in memory only.
    pub fn open(root: &Path, tag: &str, bound: u64) -> io::Result<Store> {
        let dir = root.join(store_name(tag));
        let pages = dir.join("pages");
        private_dir(&pages)?;
        let tag_file = dir.join("tag");
        if fs::read_to_string(&tag_file).ok().as_deref() != Some(tag) {
            fs::write(&tag_file, tag)?;
        }
        // Proves the store writable, and exists for flushes to lock.
        lock_file(&dir)?;
        let (index, _) = Records::decode(&fs::read(dir.join("meta")).unwrap_or_default());
        let store = Store {
            dir,
            pages,
            bound,
            on_disk: Mutex::new(index.clone()),
            index: Mutex::new(index),
            taken: Mutex::default(),
            stale: Mutex::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            validations: AtomicU64::new(0),
            validated_ahead: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            broken: AtomicBool::new(false),
            queued: Mutex::new(0),
            written: std::sync::Condvar::new(),
        };
        store.bytes.store(store.disk_bytes(), Ordering::Relaxed);
        Ok(store)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn disk_bytes(&self) -> u64 {
        let meta = fs::metadata(self.dir.join("meta")).map_or(0, |m| m.len());
        let pages: u64 = pages::list(&self.pages)
            .map(|l| l.iter().map(|p| p.bytes).sum())
            .unwrap_or(0);
        meta + pages
    }

    /// The counters so far.
    pub fn stats(&self) -> StoreStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StoreStats {
            hits: get(&self.hits),
            misses: get(&self.misses),
            validations: get(&self.validations),
            validated_ahead: get(&self.validated_ahead),
            bytes: get(&self.bytes),
        }
    }

    /// Counts a record used after the server confirmed it.
    pub fn count_hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a record the server showed out of date.
    pub fn count_miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request sent to confirm a record.
    pub fn count_validation(&self) {
        self.validations.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `n` requests sent together, ahead of use, to confirm records.
    pub fn count_validations_ahead(&self, n: u64) {
        self.validations.fetch_add(n, Ordering::Relaxed);
        self.validated_ahead.fetch_add(n, Ordering::Relaxed);
    }

    /// The probes that confirm what this store keeps below the directory with qid
    /// path `root`, at most `max`, most recently used first ([`ahead`]).
    pub fn probes_ahead(&self, root: u64, max: usize) -> Vec<ahead::Probe> {
        ahead::probes(&self.index(), root, max)
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Records> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the store kept a record of directory `dir`: one that waits to be tried,
    /// or one taken out to be (it may be on its way into the mount's cache; see
    /// [`Store::take_dir`]).
    pub fn has_dir(&self, dir: u64) -> bool {
        let index = self.index();
        index.dirs.contains_key(&dir) || self.taken().contains(&dir)
    }

    /// Directory `dir`'s record, taken out: each is tried once per process. The
    /// directory is still said to have one ([`Store::has_dir`]): whoever looks it up
    /// meanwhile must wait for the one taking it in, and find its names in the cache,
    /// not ask the server for them (a name the record says is missing would be a
    /// failed walk).
    pub fn take_dir(&self, dir: u64) -> Option<DirRecord> {
        let mut index = self.index();
        let record = index.dirs.remove(&dir)?;
        self.taken().insert(dir);
        Some(record)
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<u64>> {
        self.taken.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Directory `dir` is no longer at `version`: its record goes at the next flush.
    pub fn dir_out_of_date(&self, dir: u64, version: u32) {
        self.count_miss();
        self.stale
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dir, version);
    }

    /// The target of the symlink with qid path `path`, if read at `version`.
    pub fn link(&self, path: u64, version: u32) -> Option<Box<str>> {
        let index = self.index();
        let link = index.links.get(&path)?;
        (version != 0 && link.version == version).then(|| link.target.clone())
    }

    /// Whether a symlink target is kept for qid path `path`.
    pub fn has_link(&self, path: u64) -> bool {
        self.index().links.contains_key(&path)
    }

    /// Forgets the target kept of `path` in this process (found out of date).
    pub fn link_out_of_date(&self, path: u64) {
        self.count_miss();
        self.index().links.remove(&path);
    }

    /// What is kept of the file with qid path `path` (to be confirmed by its qid
    /// before use).
    pub fn file(&self, path: u64) -> Option<FileRecord> {
        self.index().files.get(&path).cloned()
    }

    /// Forgets the attributes kept of `path` in this process (found out of date).
    pub fn file_out_of_date(&self, path: u64) {
        self.count_miss();
        self.index().files.remove(&path);
    }

    /// A page, if a good copy is on disk.
    pub fn read_page(&self, key: PageKey) -> Option<Vec<u8>> {
        let page = pages::read(&self.pages, key);
        match page.is_some() {
            true => self.count_hit(),
            false => self.count_miss(),
        }
        page
    }

    /// A page on its way to disk from another thread: a flush waits for it until it
    /// is written, or dropped unwritten (a runtime shut down before its task ran).
    pub fn queue_page(self: &Arc<Store>) -> QueuedPage {
        *self.queued.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        QueuedPage(self.clone())
    }

    /// Keeps a page; sweeps when the store has outgrown its bound. Called off the
    /// reader's path.
    pub fn write_page(&self, key: PageKey, data: &[u8]) {
        // Written even when a copy is there: a page is fetched only when the copy on
        // disk was not good (or a read ahead went past it), and a bad one must go.
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        match pages::write(&self.pages, key, data) {
            Ok(n) => {
                if self.bytes.fetch_add(n, Ordering::Relaxed) + n > self.bound {
                    if let Err(e) = self.sweep_pages() {
                        self.broke(&e);
                    }
                }
            }
            Err(e) => self.broke(&e),
        }
    }

    /// Waits (a few seconds at most) for the pages queued to be written.
    fn wait_for_pages(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut n = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        while *n > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            n = self
                .written
                .wait_timeout(n, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn broke(&self, e: &io::Error) {
        if !self.broken.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cache=fscache: cannot write to {}: {e}; this mount keeps no more on disk",
                self.dir.display()
            );
        }
    }

    /// Holds the store's lock until dropped.
    fn lock(&self) -> io::Result<fs::File> {
        let file = lock_file(&self.dir)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(file)
    }

    /// Writes what this process knows (`ours`) into `meta`, merged with what other
    /// processes wrote since: a directory at the same version gets both's names, one
    /// at another version is ours; records found out of date go; then the bound.
    pub fn flush(&self, ours: Records) -> io::Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.wait_for_pages();
        let mut on_disk = self.on_disk.lock().unwrap_or_else(|e| e.into_inner());
        let nothing_stale = self
            .stale
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        if nothing_stale && ours.known_to(&on_disk, now_secs().saturating_sub(3600)) {
            return Ok(());
        }
        match self.flush_locked(ours) {
            Ok(records) => {
                *on_disk = records;
                Ok(())
            }
            Err(e) => {
                self.broke(&e);
                Err(e)
            }
        }
    }

    /// The flush itself, under the lock: returns what `meta` holds now.
    fn flush_locked(&self, ours: Records) -> io::Result<Records> {
        let _lock = self.lock()?;
        let meta = self.dir.join("meta");
        let (mut disk, _) = Records::decode(&fs::read(&meta).unwrap_or_default());
        let stale = std::mem::take(&mut *self.stale.lock().unwrap_or_else(|e| e.into_inner()));
        for (dir, version) in stale {
            if disk.dirs.get(&dir).is_some_and(|r| r.version == version) {
                disk.dirs.remove(&dir);
            }
        }
        for (path, mut mine) in ours.dirs {
            if let Some(theirs) = disk.dirs.remove(&path) {
                if theirs.version == mine.version {
                    for (name, qid) in theirs.names {
                        mine.names.entry(name).or_insert(qid);
                    }
                    mine.complete |= theirs.complete;
                }
            }
            disk.dirs.insert(path, mine);
        }
        disk.links.extend(ours.links);
        disk.files.extend(ours.files);
        let pages = self.bound_to(&mut disk)?;
        write_atomically(&meta, &disk.encode())?;
        let meta_bytes = fs::metadata(&meta).map_or(0, |m| m.len());
        self.bytes.store(meta_bytes + pages, Ordering::Relaxed);
        Ok(disk)
    }

    /// Drops the least recently used pages and records of `records` until the store
    /// fits nine tenths of the bound (nothing, if it fits the bound); returns the bytes
    /// of pages left.
    fn bound_to(&self, records: &mut Records) -> io::Result<u64> {
        let pages = pages::list(&self.pages)?;
        let weights = records.weights();
        let page_bytes: u64 = pages.iter().map(|p| p.bytes).sum();
        let mut total = records::MAGIC.len() as u64
            + page_bytes
            + weights.iter().map(|(_, _, w)| w).sum::<u64>();
        if total <= self.bound {
            return Ok(page_bytes);
        }
        enum Victim {
            Page(PathBuf),
            Record(records::RecordKey),
        }
        // Oldest first, by last use (nanoseconds: pages' mtimes are finer than the
        // records' seconds).
        let nanos = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        };
        let mut victims: Vec<(u128, u64, Victim)> = pages
            .into_iter()
            .map(|p| (nanos(p.used), p.bytes, Victim::Page(p.file)))
            .chain(
                weights
                    .into_iter()
                    .map(|(key, used, w)| (used as u128 * 1_000_000_000, w, Victim::Record(key))),
            )
            .collect();
        victims.sort_by_key(|(used, _, _)| *used);
        let target = self.bound / 10 * 9;
        let mut pages_left = page_bytes;
        for (_, bytes, victim) in victims {
            if total <= target {
                break;
            }
            match victim {
                Victim::Page(file) => {
                    if fs::remove_file(&file).is_ok() {
                        pages_left -= bytes;
                    }
                }
                Victim::Record(key) => records.remove(key),
            }
            total -= bytes;
        }
        Ok(pages_left)
    }

    /// The bound, counting pages only against what `meta` takes now.
    fn sweep_pages(&self) -> io::Result<()> {
        let _lock = self.lock()?;
        let meta = self.dir.join("meta");
        let (mut disk, _) = Records::decode(&fs::read(&meta).unwrap_or_default());
        let before = disk.len();
        let pages = self.bound_to(&mut disk)?;
        if disk.len() != before {
            write_atomically(&meta, &disk.encode())?;
        }
        let meta_bytes = fs::metadata(&meta).map_or(0, |m| m.len());
        self.bytes.store(meta_bytes + pages, Ordering::Relaxed);
        Ok(())
    }
}

fn lock_file(dir: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))
}

/// Replaces `file` with `data`: all of it, durably, or (after a crash) the old one.
fn write_atomically(file: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let temp = file.with_extension(format!("tmp-{}", std::process::id()));
    let result = fs::File::create(&temp).and_then(|mut f| {
        f.write_all(data)?;
        f.sync_all()
    });
    let result = result.and_then(|()| fs::rename(&temp, file));
    if result.is_err() {
        let _ = fs::remove_file(&temp);
        return result;
    }
    // The rename itself survives a host restart once the directory is synced.
    if let Some(parent) = file.parent() {
        fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// A page announced by [`Store::queue_page`]; done when dropped.
#[derive(Debug)]
pub struct QueuedPage(Arc<Store>);

impl QueuedPage {
    /// Writes the page.
    pub fn write(self, key: PageKey, data: &[u8]) {
        self.0.write_page(key, data);
    }
}

impl Drop for QueuedPage {
    fn drop(&mut self) {
        let mut n = self.0.queued.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        self.0.written.notify_all();
    }
}

/// A store, as `wasm9p cache ls` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreInfo {
    /// Its tag.
    pub tag: String,
    /// Its directory.
    pub dir: PathBuf,
    /// Bytes on disk.
    pub bytes: u64,
    /// Records in `meta`.
    pub records: usize,
    /// Page files.
    pub pages: usize,
    /// When it was last written or read (Unix seconds).
    pub used: u64,
}

/// Every store under `root` (none if `root` does not exist).
pub fn stores(root: &Path) -> io::Result<Vec<StoreInfo>> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let dir = entry?.path();
        let Ok(tag) = fs::read_to_string(dir.join("tag")) else {
            continue; // not a store
        };
        let meta = fs::read(dir.join("meta")).unwrap_or_default();
        let pages = pages::list(&dir.join("pages")).unwrap_or_default();
        let used = pages
            .iter()
            .map(|p| unix_secs(p.used))
            .chain(
                fs::metadata(dir.join("meta"))
                    .and_then(|m| m.modified())
                    .map(unix_secs),
            )
            .max()
            .unwrap_or(0);
        out.push(StoreInfo {
            tag,
            bytes: meta.len() as u64 + pages.iter().map(|p| p.bytes).sum::<u64>(),
            records: Records::decode(&meta).0.len(),
            pages: pages.len(),
            used,
            dir,
        });
    }
    out.sort_by(|a, b| a.tag.cmp(&b.tag));
    Ok(out)
}

/// Removes the stores under `root` (only the one tagged `tag`, if given), each under
/// its lock; returns what was removed. A process using one meanwhile keeps its cache
/// in memory and says once that it can no longer write it.
pub fn clear(root: &Path, tag: Option<&str>) -> io::Result<Vec<StoreInfo>> {
    let mut removed = Vec::new();
    for store in stores(root)? {
        if tag.is_some_and(|t| t != store.tag) {
            continue;
        }
        let lock = lock_file(&store.dir)?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
        fs::remove_dir_all(&store.dir)?;
        removed.push(store);
    }
    Ok(removed)
}

#[cfg(test)]
mod tests;
