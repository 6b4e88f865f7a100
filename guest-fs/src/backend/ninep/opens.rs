//! Opening files on a 9p mount: when an open may skip the server (loose mode, or
//! `nocto`, for a file opened for reading before and not changed through the mount
//! since), when it goes as one flight (`flight`), and close-to-open everywhere else,
//! pages keyed by the version the server gives (or by the attributes' content stamp
//! where the server keeps no versions). What an open file does then is `file`'s.

use std::time::Instant;

use wasm9p_proto::{Errno, Qid};

use super::check::content_stamp;
use super::file::{NinepFile, Source};
use super::{parts, NinepFs};
use crate::backend::{OpenFile, OpenFlags};
use crate::node::Node;

impl NinepFs {
    /// A read-only open of the node cached as `cached` (at `cached_generation`) that
    /// asked the server at `at` found the file at `qid`: the next open may not need
    /// to. Keyed as the next open will look it up: loose (and nocto), by the cached
    /// node's qid; checking, by the version the server gave. Made again after every
    /// walk: `at` says when the server was last asked.
    fn remember_readable(
        &self,
        cached: Qid,
        qid: Qid,
        deferrable: bool,
        cached_generation: u64,
        at: Instant,
    ) {
        if !(deferrable || self.policy().checks()) {
            return;
        }
        let (mark, generation) = match deferrable {
            true => (cached, cached_generation),
            false => (qid, self.cache.generation(qid.path)),
        };
        self.cache
            .insert_readable(mark.path, mark.version, generation, qid.version, at);
    }

    pub(super) async fn open_file(
        &self,
        source: Source,
        qid: Qid,
        flags: OpenFlags,
    ) -> Result<Box<dyn OpenFile>, Errno> {
        let open = NinepFile::open(
            source,
            qid,
            flags,
            self.cache.clone(),
            &self.writers,
            &self.deferrals,
        )
        .await?;
        Ok(Box::new(open))
    }

    pub(super) async fn open_node(
        &self,
        file: &Node,
        flags: OpenFlags,
    ) -> Result<Box<dyn OpenFile>, Errno> {
        let n = parts(file)?;
        let read_only = !(flags.write || flags.truncate || flags.append);
        let pages = self.policy().pages();
        // Loose, a file opened for reading (or read) before through this mount at
        // the cached qid and not changed through it since: the cached qid stands,
        // and the server is asked only if a read misses the pages (see
        // `file`). A first open goes to the server, so that whatever open
        // may answer (EACCES, ENOENT...) comes from it; so does the first one after
        // each change through the mount (write, truncate, chmod, chown: the
        // generation moves on), and it makes the next ones deferrable again.
        // With `nocto` (and a window), the same within the window after the server
        // was last asked.
        let deferrable =
            self.policy().metadata() && pages && read_only && self.policy().opens_believe();
        let cached_generation = self.cache.generation(n.qid.path);
        let lazy = match deferrable {
            true => self
                .cache
                .readable_believed(n.qid.path, n.qid.version, cached_generation)
                .or_else(|| {
                    (!self.policy().checks()
                        && self
                            .cache
                            .has_page(n.qid.path, n.qid.version, cached_generation, 0))
                    .then_some(n.qid.version)
                }),
            false => None,
        };
        if let Some(version) = lazy {
            let source = Source::Lazy {
                root: self.root.clone(),
                path: n.path.to_vec(),
            };
            let qid = Qid { version, ..n.qid };
            return self.open_file(source, qid, flags).await;
        }
        if deferrable {
            if let Some(open) = self.open_from_store(file, flags, cached_generation).await {
                return open;
            }
        }
        // Everywhere else an open asks the server (close-to-open): the walk's qid is
        // fresh, and pages are keyed by the version it has now.
        let asked = self.cache.asking();
        if read_only && self.opens_in_flight(n.qid, cached_generation) {
            let (open, qid) = self.open_in_flight(&n.path, flags, asked).await?;
            self.remember_readable(n.qid, qid, deferrable, cached_generation, asked.at);
            return Ok(open);
        }
        let fid = self.walk(&n.path).await?;
        let mut qid = fid.qid;
        if qid.version == 0 && pages {
            // A server that keeps no versions (diod sends 0 for every file): pages
            // are keyed by what its attributes say of the contents now (as Linux's
            // ignoreqv), so an open that asks the server never reads the pages of
            // before a change there. What other opens of the file buffer goes out
            // first: the stamp, and the size cached with it, must count it.
            self.writers.push_out(qid.path).await;
            let a = fid.getattr().await?;
            qid.version = content_stamp(&a);
            if self.policy().metadata() {
                self.cache.insert_attr(a, asked);
            }
        } else if self.policy().metadata() && self.policy().checks() {
            // Cached attributes stand only if the file is at the version they were
            // fetched at: a stale size would cut reads of a grown file short.
            match self.cache.unconfirmed_attr(qid.path) {
                Some(old) if old.qid == qid => self.cache.confirm_attr(old, asked),
                Some(_) => self.cache.forget_attr(qid.path),
                None => {}
            }
        }
        let generation = self.cache.generation(qid.path);
        let opened_before = self.policy().checks()
            && read_only
            && pages
            && self
                .cache
                .readable(qid.path, qid.version, generation)
                .is_some();
        let source = match opened_before {
            // Opened for reading at this very version before: the Tlopen waits
            // for the first read that misses the pages.
            true => Source::Walked(fid),
            false => Source::Opened(fid),
        };
        let open = self.open_file(source, qid, flags).await?;
        if read_only && pages {
            self.remember_readable(n.qid, qid, deferrable, cached_generation, asked.at);
        }
        if flags.truncate && flags.write {
            self.cache.forget_attr(file.id);
        }
        Ok(open)
    }
}
