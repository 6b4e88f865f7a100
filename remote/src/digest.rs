//! Digests as REAPI names blobs: the SHA-256 of the bytes and their size.

use sha2::{Digest as _, Sha256};

use crate::apis::v2;

/// A blob's name: its SHA-256 and its size in bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hash: [u8; 32],
    size: u64,
}

/// A digest a peer sent that is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{hash:?}/{size} is not a SHA-256 digest (64 hex digits and a size of 0 or more)")]
pub struct BadDigest {
    /// The hash as sent.
    pub hash: String,
    /// The size as sent.
    pub size: i64,
}

impl Digest {
    /// The digest of the empty blob.
    pub fn empty() -> Digest {
        Digest::of(&[])
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest {
            hash: Sha256::digest(bytes).into(),
            size: bytes.len() as u64,
        }
    }

    /// The digest of what `reader` reads to its end.
    pub fn of_reader(mut reader: impl std::io::Read) -> std::io::Result<Digest> {
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 << 10];
        let mut size = 0u64;
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
        }
        Ok(Digest {
            hash: hasher.finalize().into(),
            size,
        })
    }

    /// A digest from its protobuf form, checked.
    pub fn from_proto(d: &v2::Digest) -> Result<Digest, BadDigest> {
        let bad = || BadDigest {
            hash: d.hash.clone(),
            size: d.size_bytes,
        };
        let size = u64::try_from(d.size_bytes).map_err(|_| bad())?;
        if d.hash.len() != 64 || d.hash.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad());
        }
        let mut hash = [0u8; 32];
        hex::decode_to_slice(&d.hash, &mut hash).map_err(|_| bad())?;
        Ok(Digest { hash, size })
    }

    /// Its protobuf form.
    pub fn to_proto(&self) -> v2::Digest {
        v2::Digest {
            hash: self.hex(),
            size_bytes: self.size as i64,
        }
    }

    /// The hash in lowercase hex.
    pub fn hex(&self) -> String {
        hex::encode(self.hash)
    }

    /// The SHA-256 itself.
    pub fn sha256(&self) -> [u8; 32] {
        self.hash
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The first eight bytes of the hash, as a number (node numbers, qid versions).
    pub fn prefix(&self) -> u64 {
        u64::from_be_bytes(self.hash[..8].try_into().expect("eight bytes"))
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.hex(), self.size)
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Digest({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_the_sha256_and_size_and_round_trip_their_protobuf_form() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(d.size(), 3);
        assert_eq!(Digest::from_proto(&d.to_proto()), Ok(d));
        assert_eq!(
            Digest::of_reader(&b"abc"[..]).unwrap(),
            d,
            "read or in memory alike"
        );
        assert_eq!(
            Digest::empty().hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_digest_that_is_not_one_is_refused() {
        let proto = |hash: &str, size| v2::Digest {
            hash: hash.into(),
            size_bytes: size,
        };
        let good = Digest::of(b"x").hex();
        assert!(Digest::from_proto(&proto(&good, -1)).is_err());
        assert!(Digest::from_proto(&proto(&good[..63], 1)).is_err());
        assert!(Digest::from_proto(&proto(&good.to_uppercase(), 1)).is_err());
        assert!(Digest::from_proto(&proto(&format!("{}zz", &good[..62]), 1)).is_err());
        assert!(Digest::from_proto(&proto("", 0)).is_err());
    }
}
