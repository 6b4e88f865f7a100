//! What a store keeps about names and files, and its on-disk form (the `meta` file).
//!
//! `meta` is a header ([`MAGIC`]) and a sequence of frames, `len[4] crc32[4] body[len]`
//! (little-endian, the CRC of the body). A body is `kind[1] used[8] path[8]` and then:
//! - a directory (`kind` 1): `version[4] complete[1] count[4]`, then per name the name
//!   (a 9P string), `present[1]` and, when present, its qid (13 bytes);
//! - a symlink (2): `version[4]` and its target (a 9P string);
//! - a file's attributes (3): `readable[1]` (the server let it be opened for reading
//!   at that qid) and an Rgetattr body.
//!
//! `used` is when the record was last used (Unix seconds): the store's LRU order.
//! Decoding never trusts the bytes: a frame whose CRC or contents do not check out,
//! or a length past the end (a torn write), ends the decoding there, and what came
//! before is kept.

use std::collections::HashMap;

use bytes::{Buf, BufMut, Bytes};
use wasm9p_proto::{Qid, Rgetattr, Wire};

/// The first bytes of a `meta` file (format version 1).
pub const MAGIC: &[u8; 8] = b"W9PFSC01";

/// The largest body a frame may claim (a directory of 4096 long names fits).
const MAX_BODY: usize = 16 << 20;

const DIR: u8 = 1;
const LINK: u8 = 2;
const FILE: u8 = 3;

/// What is known of the names in a directory at one of its qid versions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirRecord {
    /// The directory's qid version these answers were learnt under (never 0).
    pub version: u32,
    /// Each name known: its qid, or `None` when it is known to be missing.
    pub names: HashMap<Box<str>, Option<Qid>>,
    /// Whether `names` holds the directory's whole listing (every name not in it is
    /// missing).
    pub complete: bool,
    /// Last use, Unix seconds.
    pub used: u64,
}

/// A symlink's target, at the link's qid version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkRecord {
    /// The link's qid version when it was read (never 0).
    pub version: u32,
    /// Its target.
    pub target: Box<str>,
    /// Last use, Unix seconds.
    pub used: u64,
}

/// A file's attributes (with its qid, whose version says whether they still hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRecord {
    /// As the server gave them.
    pub attr: Rgetattr,
    /// Whether the server let the mount open the file for reading at that qid.
    pub readable: bool,
    /// Last use, Unix seconds.
    pub used: u64,
}

/// Everything a store knows about names and files, by qid path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Records {
    /// Directories' names.
    pub dirs: HashMap<u64, DirRecord>,
    /// Symlink targets.
    pub links: HashMap<u64, LinkRecord>,
    /// Files' attributes.
    pub files: HashMap<u64, FileRecord>,
}

/// Which record a frame holds, to weigh and drop records one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKey {
    /// A directory's record.
    Dir(u64),
    /// A symlink's.
    Link(u64),
    /// A file's.
    File(u64),
}

impl Records {
    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.links.is_empty() && self.files.is_empty()
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.dirs.len() + self.links.len() + self.files.len()
    }

    /// Whether `other` holds every record here (all of a directory's names, at the
    /// same version), each used there at `since` or later: then writing these records
    /// would add nothing but times of use.
    pub fn known_to(&self, other: &Records, since: u64) -> bool {
        let dirs = self.dirs.iter().all(|(path, mine)| {
            other.dirs.get(path).is_some_and(|theirs| {
                theirs.version == mine.version
                    && theirs.used >= since
                    && (theirs.complete || !mine.complete)
                    && mine
                        .names
                        .iter()
                        .all(|(name, qid)| theirs.names.get(name) == Some(qid))
            })
        });
        let links = self.links.iter().all(|(path, mine)| {
            other.links.get(path).is_some_and(|theirs| {
                (theirs.version, &theirs.target) == (mine.version, &mine.target)
                    && theirs.used >= since
            })
        });
        let files = self.files.iter().all(|(path, mine)| {
            other.files.get(path).is_some_and(|theirs| {
                (&theirs.attr, theirs.readable) == (&mine.attr, mine.readable)
                    && theirs.used >= since
            })
        });
        dirs && links && files
    }

    /// Every record's key, last use and encoded size (for the size bound).
    pub fn weights(&self) -> Vec<(RecordKey, u64, u64)> {
        let mut out = Vec::with_capacity(self.len());
        for (path, r) in &self.dirs {
            out.push((RecordKey::Dir(*path), r.used, framed(&dir_body(*path, r))));
        }
        for (path, r) in &self.links {
            out.push((RecordKey::Link(*path), r.used, framed(&link_body(*path, r))));
        }
        for (path, r) in &self.files {
            out.push((RecordKey::File(*path), r.used, framed(&file_body(*path, r))));
        }
        out
    }

    /// Drops one record.
    pub fn remove(&mut self, key: RecordKey) {
        match key {
            RecordKey::Dir(p) => drop(self.dirs.remove(&p)),
            RecordKey::Link(p) => drop(self.links.remove(&p)),
            RecordKey::File(p) => drop(self.files.remove(&p)),
        }
    }

    /// The `meta` file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        let mut frame = |body: Vec<u8>| {
            out.put_u32_le(body.len() as u32);
            out.put_u32_le(crc32fast::hash(&body));
            out.extend_from_slice(&body);
        };
        for (path, r) in &self.dirs {
            frame(dir_body(*path, r));
        }
        for (path, r) in &self.links {
            frame(link_body(*path, r));
        }
        for (path, r) in &self.files {
            frame(file_body(*path, r));
        }
        out
    }

    /// Reads a `meta` file: the records, and how many bytes at its end were dropped
    /// as torn or corrupt (0: all of it was good). A file without the header (another
    /// format, or garbage) is dropped whole.
    pub fn decode(data: &[u8]) -> (Records, usize) {
        let mut records = Records::default();
        let Some(mut rest) = data.strip_prefix(MAGIC.as_slice()) else {
            return (records, data.len());
        };
        while !rest.is_empty() {
            let Some(body) = next_frame(&mut rest) else {
                return (records, rest.len());
            };
            if records.read_body(Bytes::copy_from_slice(body)).is_none() {
                // A frame that checked out but does not parse: written by a broken
                // store, so nothing after it is believed either.
                return (records, rest.len() + body.len() + 8);
            }
        }
        (records, 0)
    }

    fn read_body(&mut self, mut b: Bytes) -> Option<()> {
        let kind = u8::decode(&mut b).ok()?;
        let used = u64::decode(&mut b).ok()?;
        let path = u64::decode(&mut b).ok()?;
        match kind {
            DIR => {
                let version = u32::decode(&mut b).ok()?;
                let complete = u8::decode(&mut b).ok()? != 0;
                let count = u32::decode(&mut b).ok()? as usize;
                let mut names = HashMap::with_capacity(count.min(4096));
                for _ in 0..count {
                    let name = String::decode(&mut b).ok()?;
                    let qid = match u8::decode(&mut b).ok()? {
                        0 => None,
                        _ => Some(Qid::decode(&mut b).ok()?),
                    };
                    names.insert(name.into_boxed_str(), qid);
                }
                self.dirs.insert(
                    path,
                    DirRecord {
                        version,
                        names,
                        complete,
                        used,
                    },
                );
            }
            LINK => {
                let version = u32::decode(&mut b).ok()?;
                let target = String::decode(&mut b).ok()?.into_boxed_str();
                self.links.insert(
                    path,
                    LinkRecord {
                        version,
                        target,
                        used,
                    },
                );
            }
            FILE => {
                let readable = u8::decode(&mut b).ok()? != 0;
                let attr = Rgetattr::decode(&mut b).ok()?;
                (attr.qid.path == path).then_some(())?;
                self.files.insert(
                    path,
                    FileRecord {
                        attr,
                        readable,
                        used,
                    },
                );
            }
            _ => return None,
        }
        b.is_empty().then_some(())
    }
}

/// The next frame's body, if its length and CRC check out; advances `rest` past it.
fn next_frame<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let mut head = rest.get(..8)?;
    let len = head.get_u32_le() as usize;
    let crc = head.get_u32_le();
    if len > MAX_BODY {
        return None;
    }
    let body = rest.get(8..8 + len)?;
    if crc32fast::hash(body) != crc {
        return None;
    }
    *rest = &rest[8 + len..];
    Some(body)
}

fn framed(body: &[u8]) -> u64 {
    8 + body.len() as u64
}

fn head(kind: u8, used: u64, path: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(64);
    b.put_u8(kind);
    b.put_u64_le(used);
    b.put_u64_le(path);
    b
}

fn dir_body(path: u64, r: &DirRecord) -> Vec<u8> {
    let mut b = head(DIR, r.used, path);
    b.put_u32_le(r.version);
    b.put_u8(r.complete as u8);
    // Names too long for a 9P string are not kept (no server sends one).
    let names: Vec<_> = r
        .names
        .iter()
        .filter(|(name, _)| name.len() <= u16::MAX as usize)
        .collect();
    b.put_u32_le(names.len() as u32);
    for (name, qid) in names {
        name.to_string().encode(&mut b);
        match qid {
            Some(q) => {
                b.put_u8(1);
                q.encode(&mut b);
            }
            None => b.put_u8(0),
        }
    }
    b
}

fn link_body(path: u64, r: &LinkRecord) -> Vec<u8> {
    let mut b = head(LINK, r.used, path);
    b.put_u32_le(r.version);
    r.target.to_string().encode(&mut b);
    b
}

fn file_body(path: u64, r: &FileRecord) -> Vec<u8> {
    let mut b = head(FILE, r.used, path);
    b.put_u8(r.readable as u8);
    r.attr.encode(&mut b);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qid(path: u64, version: u32) -> Qid {
        Qid {
            ty: 0,
            version,
            path,
        }
    }

    pub(crate) fn sample() -> Records {
        let mut r = Records::default();
        let names = [
            ("stdio.h".into(), Some(qid(11, 7))),
            ("missing.h".into(), None),
        ];
        r.dirs.insert(
            5,
            DirRecord {
                version: 3,
                names: names.into_iter().collect(),
                complete: false,
                used: 1000,
            },
        );
        r.links.insert(
            12,
            LinkRecord {
                version: 9,
                target: "../lib/x".into(),
                used: 1001,
            },
        );
        let attr = Rgetattr {
            valid: 0x7ff,
            qid: qid(11, 7),
            mode: 0o100644,
            uid: 1,
            gid: 2,
            nlink: 1,
            rdev: 0,
            size: 1234,
            blksize: 4096,
            blocks: 8,
            atime_sec: 1,
            atime_nsec: 2,
            mtime_sec: 3,
            mtime_nsec: 4,
            ctime_sec: 5,
            ctime_nsec: 6,
            btime_sec: 0,
            btime_nsec: 0,
            gen: 0,
            data_version: 0,
        };
        r.files.insert(
            11,
            FileRecord {
                attr,
                readable: true,
                used: 1002,
            },
        );
        r
    }

    #[test]
    fn records_read_back_as_written() {
        let r = sample();
        assert_eq!(Records::decode(&r.encode()), (r, 0));
    }

    #[test]
    fn a_torn_end_loses_only_the_records_it_cut() {
        let r = sample();
        let bytes = r.encode();
        // Cut anywhere inside the last frame: the others survive.
        for cut in [1, 5, 9, 20] {
            let (got, dropped) = Records::decode(&bytes[..bytes.len() - cut]);
            assert_eq!(got.len(), 2, "cut {cut}");
            assert!(dropped > 0);
            for (path, d) in &got.dirs {
                assert_eq!(r.dirs.get(path), Some(d));
            }
        }
    }

    #[test]
    fn a_flipped_byte_is_never_served() {
        let r = sample();
        let bytes = r.encode();
        for at in MAGIC.len()..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            let (got, _) = Records::decode(&bad);
            // Whatever survives is exactly what was written, never a changed value.
            assert!(got.len() < 3, "flip at {at} went unnoticed");
            for (path, d) in &got.dirs {
                assert_eq!(r.dirs.get(path), Some(d), "flip at {at}");
            }
            for (path, l) in &got.links {
                assert_eq!(r.links.get(path), Some(l), "flip at {at}");
            }
            for (path, f) in &got.files {
                assert_eq!(r.files.get(path), Some(f), "flip at {at}");
            }
        }
        assert!(Records::decode(b"not a store").0.is_empty());
    }
}
