//! Rreaddir payload: packed directory entries `qid[13] offset[8] type[1] name[s]`.
//!
//! `offset` is the cookie that resumes a listing *after* this entry. Decoding is
//! bounded by the payload it is given: a name running past the end is an error.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::wire::{Qid, Wire};
use crate::DecodeError;

/// One directory entry as Rreaddir carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's qid.
    pub qid: Qid,
    /// Cookie to pass as Treaddir `offset` to continue after this entry.
    pub offset: u64,
    /// `DT_*` type ([`crate::consts::dt`]).
    pub ty: u8,
    /// The name within its directory.
    pub name: String,
}

impl Wire for DirEntry {
    fn byte_size(&self) -> usize {
        Qid::SIZE + 8 + 1 + self.name.byte_size()
    }
    fn encode<B: BufMut>(&self, buf: &mut B) {
        self.qid.encode(buf);
        self.offset.encode(buf);
        self.ty.encode(buf);
        self.name.encode(buf);
    }
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        Ok(DirEntry {
            qid: Qid::decode(buf)?,
            offset: u64::decode(buf)?,
            ty: u8::decode(buf)?,
            name: String::decode(buf)?,
        })
    }
}

impl DirEntry {
    /// Decodes every entry of an Rreaddir payload.
    pub fn decode_all(mut data: Bytes) -> Result<Vec<DirEntry>, DecodeError> {
        let mut entries = Vec::new();
        while data.has_remaining() {
            entries.push(DirEntry::decode(&mut data)?);
        }
        Ok(entries)
    }
}

/// Packs entries into an Rreaddir payload of at most `limit` bytes.
#[derive(Debug)]
pub struct DirEntryPacker {
    buf: BytesMut,
    limit: usize,
}

impl DirEntryPacker {
    /// A packer that will hold at most `limit` bytes.
    pub fn new(limit: usize) -> Self {
        DirEntryPacker {
            buf: BytesMut::with_capacity(limit.min(64 * 1024)),
            limit,
        }
    }

    /// Appends `entry` if it fits and returns whether it did.
    pub fn push(&mut self, entry: &DirEntry) -> bool {
        if self.buf.len() + entry.byte_size() > self.limit {
            return false;
        }
        entry.encode(&mut self.buf);
        true
    }

    /// Whether nothing has been packed yet.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The packed payload.
    pub fn finish(self) -> Bytes {
        self.buf.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, offset: u64) -> DirEntry {
        DirEntry {
            qid: Qid {
                ty: 0,
                version: 1,
                path: offset,
            },
            offset,
            ty: 8,
            name: name.into(),
        }
    }

    #[test]
    fn packer_stops_at_limit_and_entries_round_trip() {
        let one = entry("abc", 1).byte_size();
        let mut packer = DirEntryPacker::new(one * 2 + 1);
        assert!(packer.push(&entry("abc", 1)));
        assert!(packer.push(&entry("def", 2)));
        assert!(!packer.push(&entry("ghi", 3)));
        let entries = DirEntry::decode_all(packer.finish()).unwrap();
        assert_eq!(entries, vec![entry("abc", 1), entry("def", 2)]);
    }

    #[test]
    fn name_running_past_payload_is_an_error() {
        let mut buf = BytesMut::new();
        entry("abcdef", 1).encode(&mut buf);
        let cut = buf.freeze().slice(..28);
        assert!(DirEntry::decode_all(cut).is_err());
    }
}
