//! Fid handles, and attaching (which makes the first of them).

use std::fmt;

use wasm9p_proto::consts::{MAXWELEM, NOFID};
use wasm9p_proto::{Errno, Message, Qid, Rattach, Tattach, Twalk};

use super::session::Session;

/// A fid: a server-side handle on a file. Clunked when dropped.
pub struct Fid {
    pub(crate) session: Session,
    pub(crate) id: u32,
    /// The qid the fid was bound with (from attach, walk or create).
    pub qid: Qid,
    /// Set when the server already forgot the fid (remove, failed attach).
    gone: bool,
}

impl fmt::Debug for Fid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fid")
            .field("id", &self.id)
            .field("qid", &self.qid)
            .finish()
    }
}

/// A completed walk.
#[derive(Debug)]
pub struct Walk {
    /// The fid for the last name.
    pub fid: Fid,
    /// One qid per name walked; their types tell which elements are symlinks.
    pub qids: Vec<Qid>,
}

/// A walk that did not reach its last name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("walk failed at name {index}: {errno}")]
pub struct WalkError {
    /// Index (in the names given) of the first name that could not be walked: the one
    /// to cache as missing when `errno` is ENOENT.
    pub index: usize,
    /// Why: the server's error for a first element, ENOENT for a partial walk (9P does
    /// not say why a later name failed), or the session error.
    pub errno: Errno,
    /// Qids of the names that were walked before it.
    pub qids: Vec<Qid>,
}

impl Session {
    /// Attaches to export `aname`; the returned fid is its root.
    pub async fn attach(&self, aname: &str) -> Result<Fid, Errno> {
        let id = self.alloc_fid()?;
        let fid = Fid::new(self.clone(), id, Default::default());
        let msg = Tattach {
            fid: id,
            afid: NOFID,
            uname: self.config().uname.clone(),
            aname: aname.into(),
            n_uname: self.config().n_uname,
        };
        match self.call(msg.into()).await {
            Ok(Message::Rattach(Rattach { qid })) => Ok(fid.with_qid(qid)),
            Ok(_) => Err(Errno::EIO),
            Err(e) => {
                fid.forget();
                Err(e)
            }
        }
    }
}

impl Fid {
    pub(crate) fn new(session: Session, id: u32, qid: Qid) -> Fid {
        Fid {
            session,
            id,
            qid,
            gone: false,
        }
    }

    pub(crate) fn with_qid(mut self, qid: Qid) -> Fid {
        self.qid = qid;
        self
    }

    /// The server forgot this fid already: give the number back without a Tclunk.
    pub(crate) fn forget(mut self) {
        self.gone = true;
        self.session.free_fid(self.id);
    }

    /// Clunks now and returns the server's answer (dropping a fid clunks it too, in the
    /// background, without one). The number is free again either way.
    pub async fn clunk(mut self) -> Result<(), Errno> {
        self.gone = true;
        self.session.clunk(self.id).await
    }

    /// The fid number on the wire.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The session this fid belongs to.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// A second fid on the same file (a walk with no names).
    pub async fn clone_fid(&self) -> Result<Fid, Errno> {
        self.walk_chunk(&[])
            .await
            .map(|(fid, _)| fid)
            .map_err(|e| e.errno)
    }

    /// Walks `names` (any number; sent 16 per Twalk) to a new fid. Never follows a
    /// symlink: the server stops at one, and the qids say where it was.
    pub async fn walk<S: AsRef<str>>(&self, names: &[S]) -> Result<Walk, WalkError> {
        let names: Vec<String> = names.iter().map(|n| n.as_ref().to_owned()).collect();
        let mut chunks = names.chunks(MAXWELEM);
        let first = chunks.next().unwrap_or(&[]);
        let (mut fid, mut qids) = self.walk_chunk(first).await?;
        for chunk in chunks {
            match fid.walk_chunk(chunk).await {
                Ok((next, more)) => {
                    fid = next;
                    qids.extend(more);
                }
                Err(mut e) => {
                    e.index += qids.len();
                    qids.extend(e.qids);
                    e.qids = qids;
                    return Err(e);
                }
            }
        }
        Ok(Walk { fid, qids })
    }

    /// One Twalk of at most 16 names.
    async fn walk_chunk(&self, names: &[String]) -> Result<(Fid, Vec<Qid>), WalkError> {
        let fail = |index, errno, qids| WalkError { index, errno, qids };
        let newfid = self
            .session
            .alloc_fid()
            .map_err(|e| fail(0, e, Vec::new()))?;
        let msg = Twalk {
            fid: self.id,
            newfid,
            wnames: names.to_vec(),
        };
        // Made before the call: if this future is dropped while the walk is on the
        // wire, the server may have bound newfid, and dropping `new` clunks it.
        let new = Fid::new(self.session.clone(), newfid, self.qid);
        let result = self.session.call(msg.into()).await;
        match result {
            Ok(Message::Rwalk(r)) if r.wqids.len() == names.len() => {
                let qid = r.wqids.last().copied().unwrap_or(self.qid);
                Ok((new.with_qid(qid), r.wqids))
            }
            Ok(Message::Rwalk(r)) if r.wqids.len() < names.len() => {
                // Partial walk: newfid was not bound on the server.
                new.forget();
                Err(fail(r.wqids.len(), Errno::ENOENT, r.wqids))
            }
            Ok(_) => {
                // More qids than names: a broken server; the fid state is unknown,
                // so clunk it to be safe.
                drop(new);
                Err(fail(0, Errno::EIO, Vec::new()))
            }
            Err(errno @ (Errno::ETIMEDOUT | Errno::EIO)) => {
                // No answer (or a lost session): newfid may be bound; clunk it. A
                // server that never bound it answers EBADF, which is harmless.
                drop(new);
                Err(fail(0, errno, Vec::new()))
            }
            Err(errno) => {
                // The server refused the walk: newfid was not bound.
                new.forget();
                Err(fail(0, errno, Vec::new()))
            }
        }
    }
}

impl Drop for Fid {
    fn drop(&mut self) {
        if !self.gone {
            self.session.clunk_in_background(self.id);
        }
    }
}
