//! Opens, listings and stats that ask the server, in one flight where the server
//! allows it.
//!
//! A read-only open that must ask the server (the file not opened through this mount
//! before, or close-to-open) walks to the file, opens it, fetches its attributes (the
//! `fstat` a compiler sends next) and, with a page cache, reads its first bytes (the
//! read it sends after). All of it is [`Fid::walk_open`](crate::client::Fid::walk_open):
//! on a server that handles a connection's requests in order (and `pipeline=on`, the
//! default) the four go out at once, so a header a compiler opens cold costs one round
//! trip; elsewhere the walk, then the open beside the attributes: two. The attributes
//! go to the attribute cache and the bytes to the page cache, keyed as a read would key
//! them, so the guest's `fstat` and `read` find them there. A file of up to 128 KiB
//! comes whole. This is done where metadata is cached and believed for more than one
//! use (not with a zero window, where every use asks again).
//!
//! Directory listings read cold (`open_dir`: a complete directory's, a guest's
//! `readdir`) get their first Treaddir in the flight of their walk and open likewise,
//! and a `stat` of a file the cache does not know its Tgetattr in the flight of its
//! walk (`getattr_in_flight`; not where cached attributes wait to be confirmed by the
//! walk's qid, which a walk alone does). A symbolic link read on the server gets its
//! Treadlink in the flight of its walk (`readlink_in_flight`).
//!
//! Not while an open of the file buffers writes through this mount (its size is the
//! guest's, not the server's yet), nor where the mount would not open it at all
//! (a checking mode's file opened at this version before waits for its first read).

use bytes::Bytes;
use wasm9p_proto::consts::open;
use wasm9p_proto::{Errno, Qid, Rgetattr};

use super::check::content_stamp;
use super::file::{carve_pages, Source};
use super::NinepFs;
use crate::backend::{OpenFile, OpenFlags};
use crate::cache::{Asked, MountCache, PAGE_SIZE};
use crate::client::{first_entries, first_read, Entries, Fid, First, FlightError, Walk};
use crate::path::SharedPath;

impl NinepFs {
    /// What a flight sent when `asked` brought back: the directories its walk (`walk` of
    /// it) passed are recorded as any walk's are, as far as a failed walk went; a
    /// failure becomes the errno for whoever asked.
    fn landed<T>(
        &self,
        flight: Result<T, FlightError>,
        walk: impl Fn(&T) -> &Walk,
        asked: Asked,
    ) -> Result<T, Errno> {
        match flight {
            Ok(flown) => {
                self.record_dirs(&walk(&flown).qids, asked);
                Ok(flown)
            }
            Err(e) => {
                if let FlightError::Walk(w) = &e {
                    self.record_dirs(&w.qids, asked);
                }
                Err(e.errno())
            }
        }
    }

    /// Whether an open of `qid` (as the cache knows it) that asks the server should
    /// go as one flight.
    pub(super) fn opens_in_flight(&self, qid: Qid, generation: u64) -> bool {
        self.policy().attrs_with_opens()
            && !self.writers.buffering(qid.path)
            && !(self.policy().checks()
                && self
                    .cache
                    .readable(qid.path, qid.version, generation)
                    .is_some())
    }

    /// Opens `path` read-only in one flight; returns the open file and the qid it was
    /// opened at (its version the content stamp on a server that keeps none).
    pub(super) async fn open_in_flight(
        &self,
        path: &SharedPath,
        flags: OpenFlags,
        asked: Asked,
    ) -> Result<(Box<dyn OpenFile>, Qid), Errno> {
        let first = match self.policy().pages() {
            true => first_read(self.session()),
            false => First::Nothing, // no page cache to keep it in
        };
        let flight = self
            .root
            .walk_open(&path.to_vec(), open::RDONLY, true, first)
            .await;
        let flown = self.landed(flight, |f| &f.walk, asked)?;
        let fid = flown.walk.fid;
        let mut qid = fid.qid;
        let mut data = flown.data;
        let attr = match flown.attr.filter(|a| a.qid.path == qid.path) {
            // Another file than the cache knew, written through this mount meanwhile:
            // what its writers buffer goes out first, then its size is asked again.
            Some(_) if self.writers.buffering(qid.path) => {
                self.writers.push_out(qid.path).await;
                data = None;
                fid.getattr().await?
            }
            Some(a) => a,
            None => fid.getattr().await?,
        };
        if qid.version == 0 {
            qid.version = content_stamp(&attr);
        }
        let size = attr.size;
        self.cache.insert_attr(attr, asked);
        if let (Some(data), First::Read(wanted)) = (data, first) {
            let generation = self.cache.generation(qid.path);
            keep_first_pages(&self.cache, qid, generation, data, wanted, size);
        }
        let open = self.open_file(Source::Ready(fid), qid, flags).await?;
        Ok((open, qid))
    }
}

impl NinepFs {
    /// Walks to directory `path` and opens it for reading; with `entries`, its first
    /// entries (from cookie 0: `Some`) in the same flight where the mount pipelines.
    /// A listing read cold waits one round trip before its second Treaddir instead of
    /// three, and none at all when the server fills its listings and it fits in one.
    pub(super) async fn open_dir(
        &self,
        path: &SharedPath,
        entries: bool,
    ) -> Result<(Fid, Option<Entries>), Errno> {
        let flags = open::RDONLY | open::DIRECTORY;
        let asked = self.cache.asking();
        let first = match entries {
            true => first_entries(self.session()),
            false => First::Nothing,
        };
        let flight = self
            .root
            .walk_open(&path.to_vec(), flags, false, first)
            .await;
        let flown = self.landed(flight, |f| &f.walk, asked)?;
        Ok((flown.walk.fid, flown.entries))
    }

    /// The attributes of the file at `path`, from one flight (walk, attributes): a
    /// `stat` of a file the cache does not know, one round trip instead of two.
    pub(super) async fn getattr_in_flight(
        &self,
        path: &SharedPath,
        asked: Asked,
    ) -> Result<Rgetattr, Errno> {
        let flight = self.root.walk_getattr(&path.to_vec()).await;
        let (_, attr) = self.landed(flight, |(walk, _)| walk, asked)?;
        Ok(attr)
    }

    /// The target of the symbolic link at `path`, and the fid walked to it, from one
    /// flight (walk, readlink) where the mount pipelines.
    pub(super) async fn readlink_in_flight(
        &self,
        path: &SharedPath,
        asked: Asked,
    ) -> Result<(Fid, String), Errno> {
        let flight = self.root.walk_readlink(&path.to_vec()).await;
        let (walk, target) = self.landed(flight, |(walk, _)| walk, asked)?;
        Ok((walk.fid, target))
    }
}

/// Puts a file's first bytes, read from offset 0 asking `asked`, in the page cache:
/// every whole page, and the last short one only if the file ends there (`size`, from
/// the attributes of the same flight), with the empty page after a file that ends on
/// a page boundary, as a read that met the end keeps them.
fn keep_first_pages(
    cache: &MountCache,
    qid: Qid,
    generation: u64,
    data: Bytes,
    asked: u32,
    size: u64,
) {
    let len = data.len();
    let at_end = len as u64 == size && len < asked as usize;
    let mut index = 0;
    for page in carve_pages(vec![data]) {
        if page.len() < PAGE_SIZE && !at_end {
            return; // a short reply before the end: not the file's last page
        }
        cache.insert_page(qid.path, qid.version, generation, index, page);
        index += 1;
    }
    if at_end && len.is_multiple_of(PAGE_SIZE) {
        cache.insert_page(qid.path, qid.version, generation, index, Bytes::new());
    }
}
