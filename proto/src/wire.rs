//! The wire format: how each primitive, string, list and payload is laid out.
//!
//! Every 9P2000.L field is one of these types, and every message is a sequence of
//! fields, so [`Wire`] is the single definition that encode, decode and size share.
//! Integers are little-endian. A string is a `u16` byte length and UTF-8 bytes; a list
//! is a `u16` count and its elements; a payload ([`Data`]) is a `u32` length and bytes,
//! decoded without copying from the frame it arrived in.

use bytes::{Buf, BufMut, Bytes};

use crate::DecodeError;

/// A value with a 9P2000.L wire representation.
pub trait Wire: Sized {
    /// Number of bytes [`Wire::encode`] writes.
    fn byte_size(&self) -> usize;
    /// Appends the wire form of `self` to `buf`.
    fn encode<B: BufMut>(&self, buf: &mut B);
    /// Reads one value from the front of `buf`, failing (never panicking) when `buf`
    /// holds too few bytes or bytes that are not a valid value.
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError>;
}

fn need(buf: &Bytes, n: usize) -> Result<(), DecodeError> {
    if buf.remaining() < n {
        Err(DecodeError::Truncated {
            needed: n,
            available: buf.remaining(),
        })
    } else {
        Ok(())
    }
}

macro_rules! wire_int {
    ($($ty:ty => $put:ident, $get:ident;)*) => {$(
        impl Wire for $ty {
            fn byte_size(&self) -> usize {
                std::mem::size_of::<$ty>()
            }
            fn encode<B: BufMut>(&self, buf: &mut B) {
                buf.$put(*self);
            }
            fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
                need(buf, std::mem::size_of::<$ty>())?;
                Ok(buf.$get())
            }
        }
    )*};
}

wire_int! {
    u8 => put_u8, get_u8;
    u16 => put_u16_le, get_u16_le;
    u32 => put_u32_le, get_u32_le;
    u64 => put_u64_le, get_u64_le;
}

impl Wire for String {
    fn byte_size(&self) -> usize {
        2 + self.len()
    }
    fn encode<B: BufMut>(&self, buf: &mut B) {
        debug_assert!(
            self.len() <= usize::from(u16::MAX),
            "9P string longer than 65535 bytes"
        );
        buf.put_u16_le(self.len() as u16);
        buf.put_slice(self.as_bytes());
    }
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        let len = usize::from(u16::decode(buf)?);
        need(buf, len)?;
        let raw = buf.split_to(len);
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::InvalidUtf8)
    }
}

impl<T: Wire> Wire for Vec<T> {
    fn byte_size(&self) -> usize {
        2 + self.iter().map(Wire::byte_size).sum::<usize>()
    }
    fn encode<B: BufMut>(&self, buf: &mut B) {
        debug_assert!(
            self.len() <= usize::from(u16::MAX),
            "9P list longer than 65535 items"
        );
        buf.put_u16_le(self.len() as u16);
        for item in self {
            item.encode(buf);
        }
    }
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        let count = usize::from(u16::decode(buf)?);
        // Every element takes at least one byte, so a count larger than what is left
        // cannot be honest; never reserve more than the frame could hold.
        let mut items = Vec::with_capacity(count.min(buf.remaining()));
        for _ in 0..count {
            items.push(T::decode(buf)?);
        }
        Ok(items)
    }
}

/// A read or write payload: a `u32` byte count followed by the bytes.
///
/// Decoding slices the received frame (`Bytes::split_to`), so a 512 KiB read reply
/// is never copied between the socket buffer and the caller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Data(pub Bytes);

impl Wire for Data {
    fn byte_size(&self) -> usize {
        4 + self.0.len()
    }
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u32_le(self.0.len() as u32);
        buf.put_slice(&self.0);
    }
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        let len = u32::decode(buf)? as usize;
        need(buf, len)?;
        Ok(Data(buf.split_to(len)))
    }
}

impl From<Bytes> for Data {
    fn from(bytes: Bytes) -> Self {
        Data(bytes)
    }
}

impl From<Vec<u8>> for Data {
    fn from(bytes: Vec<u8>) -> Self {
        Data(Bytes::from(bytes))
    }
}

/// The server's unique identity of a file: type bits, a version that changes when the
/// file changes, and a path number unique within the export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Qid {
    /// `QTDIR`, `QTSYMLINK`, ... (see [`crate::consts::qid`]).
    pub ty: u8,
    /// Changes whenever the file's contents or metadata change.
    pub version: u32,
    /// Unique per file within an export (the server uses the inode number).
    pub path: u64,
}

impl Qid {
    /// Encoded size of a qid.
    pub const SIZE: usize = 13;

    /// Whether the qid names a directory.
    pub fn is_dir(&self) -> bool {
        self.ty & crate::consts::qid::DIR != 0
    }

    /// Whether the qid names a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.ty & crate::consts::qid::SYMLINK != 0
    }
}

impl Wire for Qid {
    fn byte_size(&self) -> usize {
        Self::SIZE
    }
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u8(self.ty);
        buf.put_u32_le(self.version);
        buf.put_u64_le(self.path);
    }
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        need(buf, Self::SIZE)?;
        Ok(Qid {
            ty: buf.get_u8(),
            version: buf.get_u32_le(),
            path: buf.get_u64_le(),
        })
    }
}

/// The `datasync` flag that Linux appends to `Tfsync`.
///
/// Linux sends `fid[4] datasync[4]`; older servers and clients (diod 1.0.24) send and
/// expect `fid[4]` alone. Decoding accepts both (absent means 0); encoding always
/// writes the Linux form.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrailingU32(pub u32);

impl Wire for TrailingU32 {
    fn byte_size(&self) -> usize {
        4
    }
    fn encode<B: BufMut>(&self, buf: &mut B) {
        buf.put_u32_le(self.0);
    }
    fn decode(buf: &mut Bytes) -> Result<Self, DecodeError> {
        if buf.is_empty() {
            Ok(TrailingU32(0))
        } else {
            u32::decode(buf).map(TrailingU32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_length_past_buffer_is_truncated_not_panic() {
        let mut buf = Bytes::from_static(&[0xff, 0xff, b'a']);
        assert!(matches!(
            String::decode(&mut buf),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn list_count_past_buffer_does_not_preallocate() {
        // 65535 qids claimed, none present: must fail, and must not reserve 65535 * 13.
        let mut buf = Bytes::from_static(&[0xff, 0xff]);
        assert!(Vec::<Qid>::decode(&mut buf).is_err());
    }

    #[test]
    fn data_is_a_slice_of_the_frame() {
        let frame = Bytes::from_static(&[3, 0, 0, 0, b'a', b'b', b'c', 9]);
        let mut buf = frame.clone();
        let data = Data::decode(&mut buf).unwrap();
        assert_eq!(&data.0[..], b"abc");
        assert_eq!(
            data.0.as_ptr(),
            frame[4..].as_ptr(),
            "payload must not be copied"
        );
        assert_eq!(buf.remaining(), 1);
    }

    #[test]
    fn invalid_utf8_string_is_an_error() {
        let mut buf = Bytes::from_static(&[2, 0, 0xc3, 0x28]);
        assert_eq!(String::decode(&mut buf), Err(DecodeError::InvalidUtf8));
    }

    #[test]
    fn fsync_datasync_is_optional_on_decode() {
        assert_eq!(TrailingU32::decode(&mut Bytes::new()), Ok(TrailingU32(0)));
        assert_eq!(
            TrailingU32::decode(&mut Bytes::from_static(&[1, 0, 0, 0])),
            Ok(TrailingU32(1))
        );
    }
}
