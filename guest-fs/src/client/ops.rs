//! Every 9P2000.L operation as a typed method on [`Fid`].

use bytes::Bytes;
use wasm9p_proto::consts::{getattr, AT_REMOVEDIR, MAX_DIRENT_SIZE, READDIRHDRSZ};
use wasm9p_proto::*;

use super::fid::Fid;
use super::learned::Newer;

/// Which attributes [`Fid::setattr`] changes; `None` leaves one alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// Truncate or extend to this size.
    pub size: Option<u64>,
    /// New access time: `Some(None)` is "now", `Some(Some((sec, nsec)))` a given time.
    pub atime: Option<Option<(u64, u64)>>,
    /// New modification time, as `atime`.
    pub mtime: Option<Option<(u64, u64)>>,
}

impl SetAttr {
    fn to_message(&self, fid: u32) -> Tsetattr {
        use wasm9p_proto::consts::setattr as v;
        let mut t = Tsetattr {
            fid,
            ..Default::default()
        };
        if let Some(mode) = self.mode {
            t.valid |= v::MODE;
            t.mode = mode;
        }
        if let Some(uid) = self.uid {
            t.valid |= v::UID;
            t.uid = uid;
        }
        if let Some(gid) = self.gid {
            t.valid |= v::GID;
            t.gid = gid;
        }
        if let Some(size) = self.size {
            t.valid |= v::SIZE;
            t.size = size;
        }
        if let Some(at) = self.atime {
            t.valid |= v::ATIME;
            if let Some((sec, nsec)) = at {
                t.valid |= v::ATIME_SET;
                (t.atime_sec, t.atime_nsec) = (sec, nsec);
            }
        }
        if let Some(mt) = self.mtime {
            t.valid |= v::MTIME;
            if let Some((sec, nsec)) = mt {
                t.valid |= v::MTIME_SET;
                (t.mtime_sec, t.mtime_nsec) = (sec, nsec);
            }
        }
        t
    }
}

/// Unwraps the expected reply variant; the session already turned a reply of the
/// wrong type into EIO, so anything else here is unreachable in practice.
macro_rules! reply {
    ($result:expr, $variant:ident) => {
        match $result? {
            Message::$variant(r) => Ok(r),
            _ => Err(Errno::EIO),
        }
    };
}

impl Fid {
    async fn rpc(&self, msg: impl Into<Message>) -> Result<Message, Errno> {
        self.session.call(msg.into()).await
    }

    /// Attributes (Tgetattr with every basic field).
    pub async fn getattr(&self) -> Result<Rgetattr, Errno> {
        reply!(
            self.rpc(Tgetattr {
                fid: self.id,
                request_mask: getattr::BASIC
            })
            .await,
            Rgetattr
        )
    }

    /// Changes attributes.
    pub async fn setattr(&self, attr: &SetAttr) -> Result<(), Errno> {
        reply!(self.rpc(attr.to_message(self.id)).await, Rsetattr).map(drop)
    }

    /// Opens the file with Linux open flags; returns its qid and the iounit.
    pub async fn lopen(&self, flags: u32) -> Result<Rlopen, Errno> {
        reply!(
            self.rpc(Tlopen {
                fid: self.id,
                flags
            })
            .await,
            Rlopen
        )
    }

    /// Creates and opens `name` in this directory; this fid then names the new file.
    pub async fn lcreate(
        &mut self,
        name: &str,
        flags: u32,
        mode: u32,
        gid: u32,
    ) -> Result<Rlcreate, Errno> {
        let msg = Tlcreate {
            fid: self.id,
            name: name.into(),
            flags,
            mode,
            gid,
        };
        let r = reply!(self.rpc(msg).await, Rlcreate)?;
        self.qid = r.qid;
        Ok(r)
    }

    /// One Tread of at most `msize - IOHDRSZ` bytes. A server that sends more than was
    /// asked gets EIO.
    pub async fn read(&self, offset: u64, count: u32) -> Result<Bytes, Errno> {
        let count = count.min(self.session.msize() - consts::IOHDRSZ);
        let r = reply!(
            self.rpc(Tread {
                fid: self.id,
                offset,
                count
            })
            .await,
            Rread
        )?;
        if r.data.0.len() > count as usize {
            return Err(Errno::EIO);
        }
        Ok(r.data.0)
    }

    /// One Twrite of at most `msize - IOHDRSZ` bytes; returns the count written.
    pub async fn write(&self, offset: u64, data: Bytes) -> Result<u32, Errno> {
        let max = (self.session.msize() - consts::IOHDRSZ) as usize;
        let data = if data.len() > max {
            data.slice(..max)
        } else {
            data
        };
        let sent = data.len() as u32;
        let r = reply!(
            self.rpc(Twrite {
                fid: self.id,
                offset,
                data: Data(data)
            })
            .await,
            Rwrite
        )?;
        if r.count > sent {
            return Err(Errno::EIO);
        }
        Ok(r.count)
    }

    /// Directory entries from cookie `offset`, at most `count` bytes of them (clamped
    /// to the msize). Empty means the end.
    pub async fn readdir(&self, offset: u64, count: u32) -> Result<Vec<DirEntry>, Errno> {
        Ok(self.entries(offset, count).await?.entries)
    }

    /// Like [`Fid::readdir`], and whether the entries ended the listing: when none
    /// came, or when the server fills its listings and left room for another.
    pub async fn entries(&self, offset: u64, count: u32) -> Result<Entries, Errno> {
        let count = count.min(self.session.msize() - READDIRHDRSZ);
        let r = reply!(
            self.rpc(Treaddir {
                fid: self.id,
                offset,
                count
            })
            .await,
            Rreaddir
        )?;
        Entries::decode(r.data.0, count, self.session.fills_listings())
    }

    /// Every entry of an open directory.
    pub async fn readdir_all(&self) -> Result<Vec<DirEntry>, Errno> {
        self.readdir_all_after(None).await
    }

    /// Every entry of an open directory, the first Treaddir's entries (from cookie 0)
    /// given when they came already (`Fid::walk_open`'s `entries`). No Treaddir is
    /// sent past a batch that ended the listing.
    pub async fn readdir_all_after(
        &self,
        mut first: Option<Entries>,
    ) -> Result<Vec<DirEntry>, Errno> {
        let mut all: Vec<DirEntry> = Vec::new();
        let mut offset = 0;
        loop {
            let batch = match first.take() {
                Some(batch) => batch,
                None => self.entries(offset, u32::MAX).await?,
            };
            offset = batch.next_cookie(offset)?;
            let end = batch.end || batch.entries.is_empty();
            all.extend(batch.entries);
            if end {
                return Ok(all);
            }
        }
    }

    /// Creates directory `name` here.
    pub async fn mkdir(&self, name: &str, mode: u32, gid: u32) -> Result<Qid, Errno> {
        reply!(
            self.rpc(Tmkdir {
                dfid: self.id,
                name: name.into(),
                mode,
                gid
            })
            .await,
            Rmkdir
        )
        .map(|r| r.qid)
    }

    /// Creates symlink `name` here pointing at `target`.
    pub async fn symlink(&self, name: &str, target: &str, gid: u32) -> Result<Qid, Errno> {
        let msg = Tsymlink {
            fid: self.id,
            name: name.into(),
            symtgt: target.into(),
            gid,
        };
        reply!(self.rpc(msg).await, Rsymlink).map(|r| r.qid)
    }

    /// Creates a FIFO, socket or device node `name` here.
    pub async fn mknod(
        &self,
        name: &str,
        mode: u32,
        major: u32,
        minor: u32,
        gid: u32,
    ) -> Result<Qid, Errno> {
        let msg = Tmknod {
            dfid: self.id,
            name: name.into(),
            mode,
            major,
            minor,
            gid,
        };
        reply!(self.rpc(msg).await, Rmknod).map(|r| r.qid)
    }

    /// The target of this symlink.
    pub async fn readlink(&self) -> Result<String, Errno> {
        reply!(self.rpc(Treadlink { fid: self.id }).await, Rreadlink).map(|r| r.target)
    }

    /// Makes `name` in this directory a hard link to `file`.
    pub async fn link(&self, file: &Fid, name: &str) -> Result<(), Errno> {
        reply!(
            self.rpc(Tlink {
                dfid: self.id,
                fid: file.id,
                name: name.into()
            })
            .await,
            Rlink
        )
        .map(drop)
    }

    /// Moves this file into `dir` as `name` (Trename).
    pub async fn rename(&self, dir: &Fid, name: &str) -> Result<(), Errno> {
        reply!(
            self.rpc(Trename {
                fid: self.id,
                dfid: dir.id,
                name: name.into()
            })
            .await,
            Rrename
        )
        .map(drop)
    }

    /// Renames `oldname` in this directory to `newname` in `newdir`. Falls back to walk +
    /// Trename when the server lacks Trenameat (as Debian's diod 1.0.24 does), as Linux
    /// does; the fallback is remembered for the session.
    pub async fn renameat(&self, oldname: &str, newdir: &Fid, newname: &str) -> Result<(), Errno> {
        let learned = self.session.learned();
        if !learned.refuses(Newer::Renameat) {
            let msg = Trenameat {
                olddirfid: self.id,
                oldname: oldname.into(),
                newdirfid: newdir.id,
                newname: newname.into(),
            };
            match self.rpc(msg).await {
                Err(Errno::EOPNOTSUPP) | Err(Errno::ENOSYS) => learned.refused(Newer::Renameat),
                other => return reply!(other, Rrenameat).map(drop),
            }
        }
        let file = self.walk(&[oldname]).await.map_err(|e| e.errno)?.fid;
        file.rename(newdir, newname).await
    }

    /// Removes `name` from this directory (`AT_REMOVEDIR` in `flags` for a directory).
    /// Falls back to walk + Tremove when the server lacks Tunlinkat.
    pub async fn unlinkat(&self, name: &str, flags: u32) -> Result<(), Errno> {
        let learned = self.session.learned();
        if !learned.refuses(Newer::Unlinkat) {
            match self
                .rpc(Tunlinkat {
                    dirfd: self.id,
                    name: name.into(),
                    flags,
                })
                .await
            {
                Err(Errno::EOPNOTSUPP) | Err(Errno::ENOSYS) => learned.refused(Newer::Unlinkat),
                other => return reply!(other, Runlinkat).map(drop),
            }
        }
        let walk = self.walk(&[name]).await.map_err(|e| e.errno)?;
        // Tremove does not know which of unlink/rmdir was meant: check it ourselves.
        let is_dir = walk.fid.qid.is_dir();
        if flags & AT_REMOVEDIR != 0 && !is_dir {
            return Err(Errno::ENOTDIR);
        }
        if flags & AT_REMOVEDIR == 0 && is_dir {
            return Err(Errno::EISDIR);
        }
        walk.fid.remove().await
    }

    /// Removes the file this fid names; the fid is gone afterwards either way.
    pub async fn remove(self) -> Result<(), Errno> {
        let result = self.rpc(Tremove { fid: self.id }).await;
        if !matches!(result, Err(Errno::EIO) | Err(Errno::ETIMEDOUT)) {
            self.forget();
        }
        reply!(result, Rremove).map(drop)
    }

    /// File system statistics.
    pub async fn statfs(&self) -> Result<Rstatfs, Errno> {
        reply!(self.rpc(Tstatfs { fid: self.id }).await, Rstatfs)
    }

    /// Flushes the open file to stable storage.
    pub async fn fsync(&self, datasync: bool) -> Result<(), Errno> {
        reply!(
            self.rpc(Tfsync {
                fid: self.id,
                datasync: TrailingU32(datasync.into())
            })
            .await,
            Rfsync
        )
        .map(drop)
    }

    /// Takes or releases a POSIX lock; returns the status (`consts::lock::*`).
    pub async fn lock(
        &self,
        ty: u8,
        flags: u32,
        start: u64,
        length: u64,
        proc_id: u32,
        client_id: &str,
    ) -> Result<u8, Errno> {
        let msg = Tlock {
            fid: self.id,
            ty,
            flags,
            start,
            length,
            proc_id,
            client_id: client_id.into(),
        };
        reply!(self.rpc(msg).await, Rlock).map(|r| r.status)
    }

    /// Tests for a conflicting POSIX lock.
    pub async fn getlock(
        &self,
        ty: u8,
        start: u64,
        length: u64,
        proc_id: u32,
        client_id: &str,
    ) -> Result<Rgetlock, Errno> {
        let msg = Tgetlock {
            fid: self.id,
            ty,
            start,
            length,
            proc_id,
            client_id: client_id.into(),
        };
        reply!(self.rpc(msg).await, Rgetlock)
    }

    /// Reads extended attribute `name` (empty: the list of names).
    pub async fn get_xattr(&self, name: &str) -> Result<Bytes, Errno> {
        let newfid = self.session.alloc_fid()?;
        let result = self
            .rpc(Txattrwalk {
                fid: self.id,
                newfid,
                name: name.into(),
            })
            .await;
        let reader = Fid::new(self.session.clone(), newfid, self.qid);
        let size = match reply!(result, Rxattrwalk) {
            Ok(r) => r.size,
            Err(e) => {
                reader.forget();
                return Err(e);
            }
        };
        if size > u64::from(u16::MAX) + 1 {
            return Err(Errno::E2BIG);
        }
        let value = reader.read_at(0, size as usize).await?;
        if value.len() as u64 != size {
            return Err(Errno::EIO);
        }
        Ok(value)
    }

    /// Sets extended attribute `name` (flags: 1 create, 2 replace). Consumes a clone of
    /// this fid, as the protocol sets the value when that fid is clunked.
    pub async fn set_xattr(&self, name: &str, value: Bytes, flags: u32) -> Result<(), Errno> {
        let writer = self.clone_fid().await?;
        let msg = Txattrcreate {
            fid: writer.id,
            name: name.into(),
            attr_size: value.len() as u64,
            flags,
        };
        reply!(writer.rpc(msg).await, Rxattrcreate)?;
        if !value.is_empty() {
            writer.write_all_at(0, value).await?;
        }
        // The value is applied on clunk, and its errors come back there.
        writer.clunk().await
    }
}

/// The entries of one Rreaddir, and whether they ended the listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entries {
    /// The entries, in the server's order.
    pub entries: Vec<DirEntry>,
    /// Whether no entry follows them: none came, or the server fills its listings
    /// ([`wasm9p_proto::consts::LISTINGS_FILL_XATTR`]) and left room for the longest entry.
    pub end: bool,
}

impl Entries {
    /// The entries of an Rreaddir payload `data`, which answered a Treaddir of `count`
    /// bytes from a server that fills its listings (`fills`) or not. A payload over
    /// `count` or that does not decode is EIO.
    pub fn decode(data: Bytes, count: u32, fills: bool) -> Result<Entries, Errno> {
        if data.len() > count as usize {
            return Err(Errno::EIO);
        }
        let end = data.is_empty() || (fills && data.len() + MAX_DIRENT_SIZE <= count as usize);
        let entries = DirEntry::decode_all(data).map_err(|_| Errno::EIO)?;
        Ok(Entries { entries, end })
    }

    /// The cookie to read on from, given the one these entries were read from: the
    /// last entry's (`offset` when there are none). A last cookie equal to `offset`
    /// would read the same entries forever: EIO.
    pub fn next_cookie(&self, offset: u64) -> Result<u64, Errno> {
        match self.entries.last() {
            None => Ok(offset),
            Some(last) if last.offset == offset => Err(Errno::EIO),
            Some(last) => Ok(last.offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(names: &[&str]) -> Bytes {
        let mut packer = DirEntryPacker::new(usize::MAX);
        for (i, name) in names.iter().enumerate() {
            let entry = DirEntry {
                qid: Qid::default(),
                offset: i as u64 + 1,
                ty: 0,
                name: (*name).into(),
            };
            assert!(packer.push(&entry));
        }
        packer.finish()
    }

    #[test]
    fn entries_end_when_none_came_or_a_filling_server_left_room_for_the_longest() {
        let two = packed(&["a", "b"]); // 50 bytes
        let roomy = (two.len() + MAX_DIRENT_SIZE) as u32;
        let e = Entries::decode(two.clone(), roomy, true).unwrap();
        assert_eq!((e.entries.len(), e.end), (2, true));
        // One byte less room: the next entry might have had a 255-byte name.
        let e = Entries::decode(two.clone(), roomy - 1, true).unwrap();
        assert!(!e.end);
        // A server that promised nothing ends its listings with an empty reply only.
        let e = Entries::decode(two.clone(), 1 << 20, false).unwrap();
        assert!(!e.end);
        let e = Entries::decode(Bytes::new(), 1 << 20, false).unwrap();
        assert_eq!((e.entries.len(), e.end), (0, true));
    }

    #[test]
    fn entries_over_their_count_or_cut_short_are_eio() {
        let two = packed(&["a", "b"]);
        let count = two.len() as u32;
        assert_eq!(
            Entries::decode(two.clone(), count - 1, true),
            Err(Errno::EIO)
        );
        assert_eq!(
            Entries::decode(two.slice(..two.len() - 1), count, true),
            Err(Errno::EIO)
        );
    }

    #[test]
    fn the_next_cookie_is_the_last_entrys_and_one_that_stays_put_is_eio() {
        let e = Entries::decode(packed(&["a", "b"]), 1 << 20, false).unwrap();
        assert_eq!(e.next_cookie(0), Ok(2));
        assert_eq!(e.next_cookie(2), Err(Errno::EIO));
        assert_eq!(Entries::default().next_cookie(7), Ok(7));
    }
}
