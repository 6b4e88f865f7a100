//! A guest's file as the cache sees it: the SHA-256 of its bytes, remembered by the
//! file's identity so that a hit need not read the guest at all.
//!
//! Reading and hashing clang.wasm's 75 MB was most of a cached `clang --version` (about
//! 0.12 s of 0.19 s: the read, the hash and the page faults of the buffer). So the cache
//! keeps, for each guest path, a *memo* (`DIR/sources/HASH-OF-PATH`): the file's
//! identity (device, inode, size, modification and change times to the nanosecond),
//! whether it is a component, and the digest of its bytes. When a later load finds the
//! identity unchanged it takes the digest from the memo, and a cached artifact is
//! mapped without the guest's bytes ever being read. Otherwise the file is read and
//! hashed, and the memo rewritten (temporary file and rename, mode 0600, in the
//! private cache directory).
//!
//! Why the identity is enough: any write to a file moves its change time, which no
//! user can set back (`utimensat` sets only the modification and access times), and a
//! replaced file has another inode. The one gap is a write within the same clock tick
//! as the read that made the memo (file times are taken from a coarse clock); so, as
//! git does with its index, an identity younger than [`SETTLED`] is not remembered,
//! and a file whose identity changed while it was being read is not either. When the
//! bytes are read after all (a miss, to compile them), the digest is taken from them,
//! never from the memo.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest as _, Sha256};

use super::{create_private_dir, is_component, refuse_precompiled, tempfile_in, LoadError};

/// The SHA-256 of a guest's bytes.
pub type Digest = [u8; 32];

/// How old a file's change time must be before its identity is remembered.
pub(super) const SETTLED: Duration = Duration::from_secs(2);

/// The memos a cache keeps at most (the oldest beyond go at each store).
pub(super) const MEMOS_KEPT: usize = 1024;

/// The subdirectory of the cache holding the memos.
pub(super) const MEMO_DIR: &str = "sources";

/// What identifies a file's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(meta: &std::fs::Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the last change is at least [`SETTLED`] before `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let Ok(now) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let changed = Duration::new(
            u64::try_from(self.ctime.0).unwrap_or(u64::MAX),
            u32::try_from(self.ctime.1).unwrap_or(0),
        );
        now.checked_sub(changed).is_some_and(|age| age >= SETTLED)
    }
}

/// One memo: an identity, and what the bytes it stands for are.
#[derive(Debug, PartialEq, Eq)]
struct Memo {
    identity: Identity,
    component: bool,
    digest: Digest,
}

impl Memo {
    const TAG: &'static str = "wasm9p-source-1";

    fn encode(&self) -> String {
        let i = &self.identity;
        format!(
            "{} {} {} {} {} {} {} {} {} {}\n",
            Self::TAG,
            i.dev,
            i.ino,
            i.size,
            i.mtime.0,
            i.mtime.1,
            i.ctime.0,
            i.ctime.1,
            u8::from(self.component),
            hex(&self.digest)
        )
    }

    /// The memo in `text`; `None` for anything else (a torn or foreign file).
    fn decode(text: &str) -> Option<Memo> {
        let line = text.strip_suffix('\n')?;
        let mut words = line.split(' ');
        if words.next()? != Self::TAG {
            return None;
        }
        let mut number = || words.next()?.parse::<i64>().ok();
        let (dev, ino, size) = (number()?, number()?, number()?);
        let mtime = (number()?, number()?);
        let ctime = (number()?, number()?);
        let component = match number()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let digest = unhex(words.next()?)?;
        if words.next().is_some() {
            return None;
        }
        Some(Memo {
            identity: Identity {
                dev: u64::try_from(dev).ok()?,
                ino: u64::try_from(ino).ok()?,
                size: u64::try_from(size).ok()?,
                mtime,
                ctime,
            },
            component,
            digest,
        })
    }
}

/// A guest's file: its size and kind, the digest of its bytes (when the cache is on),
/// and the bytes themselves once they had to be read.
pub(super) struct Source {
    path: PathBuf,
    len: u64,
    component: bool,
    digest: Option<Digest>,
    bytes: Option<Vec<u8>>,
    /// Where the memo of this path lives (`None`: the cache is off, or the path has
    /// no canonical form).
    memo: Option<PathBuf>,
}

impl Source {
    /// The guest at `path`, for a cache whose memos are in `dir` (`None`: no memos),
    /// its bytes hashed when `hashing` (there is a cache to look them up in): known
    /// from its memo when its identity is unchanged, else read (and a precompiled
    /// artifact refused).
    pub(super) fn open(
        dir: Option<&Path>,
        hashing: bool,
        path: &Path,
    ) -> Result<Source, LoadError> {
        let unreadable = |source| LoadError::Read {
            path: path.into(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(unreadable)?;
        let identity = Identity::of(&meta);
        let memo = dir.and_then(|dir| memo_path(dir, path));
        if let Some(known) = memo.as_deref().and_then(read_memo) {
            if known.identity == identity {
                return Ok(Source {
                    path: path.into(),
                    len: identity.size,
                    component: known.component,
                    digest: Some(known.digest),
                    bytes: None,
                    memo,
                });
            }
        }
        let mut source = Source {
            path: path.into(),
            len: identity.size,
            component: false,
            digest: None,
            bytes: None,
            memo,
        };
        source.read_bytes(hashing, Some(identity))?;
        Ok(source)
    }

    /// The guest's file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The guest's size in bytes.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Whether the guest is a component.
    pub(super) fn component(&self) -> bool {
        self.component
    }

    /// The digest of the guest's bytes (`None` when the cache is off).
    pub(super) fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// Whether the bytes were read (a memo hit reads none).
    #[cfg(test)]
    pub(super) fn was_read(&self) -> bool {
        self.bytes.is_some()
    }

    /// The guest's bytes, read now if they were not, and their digest: the digest of
    /// what was read, whatever the memo said.
    pub(super) fn read(&mut self) -> Result<(&[u8], Option<&Digest>), LoadError> {
        if self.bytes.is_none() {
            let hashing = self.digest.is_some();
            self.read_bytes(hashing, None)?;
        }
        Ok((
            self.bytes.as_deref().unwrap_or_default(),
            self.digest.as_ref(),
        ))
    }

    /// As [`Source::read`], giving the bytes away.
    pub(super) fn into_read(mut self) -> Result<(Vec<u8>, Option<Digest>), LoadError> {
        self.read()?;
        Ok((self.bytes.take().unwrap_or_default(), self.digest))
    }

    /// Reads and checks the bytes, hashes them when `hashing`, and remembers them when
    /// the file's identity was `before` the read and still is after it.
    fn read_bytes(&mut self, hashing: bool, before: Option<Identity>) -> Result<(), LoadError> {
        let path = self.path.clone();
        let bytes = std::fs::read(&path).map_err(|source| LoadError::Read {
            path: path.clone(),
            source,
        })?;
        refuse_precompiled(&path, &bytes)?;
        self.len = bytes.len() as u64;
        self.component = is_component(&bytes);
        self.digest = hashing.then(|| Sha256::digest(&bytes).into());
        if let (Some(memo), Some(digest), Some(before)) = (&self.memo, self.digest, before) {
            let after = std::fs::metadata(&path).ok().map(|m| Identity::of(&m));
            if after == Some(before) && before.size == self.len && before.settled(SystemTime::now())
            {
                let written = write_memo(
                    memo,
                    &Memo {
                        identity: before,
                        component: self.component,
                        digest,
                    },
                );
                if let Err(e) = written {
                    tracing::debug!("{}: not remembered: {e}", path.display());
                }
            }
        }
        self.bytes = Some(bytes);
        Ok(())
    }
}

/// Where the memo of the guest at `path` lives in the cache `dir`.
fn memo_path(dir: &Path, path: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let canonical = std::fs::canonicalize(path).ok()?;
    let name = hex(&Sha256::digest(canonical.as_os_str().as_bytes()));
    Some(dir.join(MEMO_DIR).join(name))
}

fn read_memo(path: &Path) -> Option<Memo> {
    Memo::decode(&std::fs::read_to_string(path).ok()?)
}

fn write_memo(path: &Path, memo: &Memo) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private_dir(dir)?;
    let (tmp, mut file) = tempfile_in(dir)?;
    let written = file
        .write_all(memo.encode().as_bytes())
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Keeps the newest [`MEMOS_KEPT`] memos of the cache `dir`.
pub(super) fn trim_memos(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir.join(MEMO_DIR)) else {
        return;
    };
    let mut memos: Vec<(SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if memos.len() <= MEMOS_KEPT {
        return;
    }
    memos.sort();
    for (_, path) in &memos[..memos.len() - MEMOS_KEPT] {
        let _ = std::fs::remove_file(path);
    }
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Digest> {
    let mut digest = [0u8; 32];
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_reads_back_as_written_and_a_torn_or_foreign_one_does_not() {
        let memo = Memo {
            identity: Identity {
                dev: 2049,
                ino: 77,
                size: 75 << 20,
                mtime: (1_764_000_000, 5),
                ctime: (1_764_000_001, 999_999_999),
            },
            component: true,
            digest: [0xab; 32],
        };
        let text = memo.encode();
        assert_eq!(Memo::decode(&text), Some(memo));
        for bad in [
            &text[..text.len() - 1],
            &text[..text.len() - 2],
            &text.replacen("wasm9p-source-1", "wasm9p-source-0", 1),
            &text.replacen(" 1 abab", " 2 abab", 1),
            &text.replacen("\n", " extra\n", 1),
            "",
        ] {
            assert_eq!(Memo::decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn an_identity_is_settled_only_when_its_change_is_old_enough() {
        let now = SystemTime::now();
        let at = |t: SystemTime| {
            let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap();
            Identity {
                dev: 1,
                ino: 1,
                size: 1,
                mtime: (0, 0),
                ctime: (d.as_secs() as i64, d.subsec_nanos() as i64),
            }
        };
        assert!(at(now - SETTLED - Duration::from_millis(1)).settled(now));
        assert!(!at(now - Duration::from_millis(500)).settled(now));
        assert!(!at(now + Duration::from_secs(5)).settled(now));
    }
}
