//! File pages on disk: one file per page, `pages/<path>-<version>-<index>` (hex), so
//! that processes share them without a lock (a page is written to a temporary name and
//! renamed into place: readers see all of it or none) and the LRU order is the files'
//! mtimes (set again whenever a process reads one).
//!
//! A page file is `magic[4] crc32[4] path[8] version[4] index[8] len[4] data[len]`; the
//! CRC covers everything after it. A file that does not check out (torn by a crash,
//! flipped on disk, or of another page) is removed and read as missing.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use bytes::{Buf, BufMut};

const MAGIC: &[u8; 4] = b"W9PP";
const HEADER: usize = 4 + 4 + 8 + 4 + 8 + 4;

/// Which page: of the file with qid `path`, at qid `version` (or content stamp), the
/// `index`-th of [`crate::cache::PAGE_SIZE`] bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageKey {
    /// The file's qid path.
    pub path: u64,
    /// Its version.
    pub version: u32,
    /// Which page.
    pub index: u64,
}

impl PageKey {
    fn file_name(&self) -> String {
        format!("{:016x}-{:08x}-{:x}", self.path, self.version, self.index)
    }
}

/// A page file seen by [`list`]: for the size bound.
#[derive(Debug)]
pub struct PageFile {
    /// Where it is.
    pub file: PathBuf,
    /// Bytes on disk.
    pub bytes: u64,
    /// Last use (its mtime).
    pub used: SystemTime,
}

/// Names temporary files uniquely within this process (the pid tells processes apart).
static TEMP: AtomicU64 = AtomicU64::new(0);

/// The page, if a good copy is on disk (a bad one is removed). Marks it used.
pub fn read(dir: &Path, key: PageKey) -> Option<Vec<u8>> {
    let file = dir.join(key.file_name());
    let mut f = fs::File::open(&file).ok()?;
    let mut data = Vec::new();
    if f.read_to_end(&mut data).is_err() {
        return None;
    }
    match check(&data, key) {
        Some(()) => {
            // The LRU order; a failure only makes it look older.
            let _ = f.set_modified(SystemTime::now());
            data.drain(..HEADER);
            Some(data)
        }
        None => {
            let _ = fs::remove_file(&file);
            None
        }
    }
}

fn check(data: &[u8], key: PageKey) -> Option<()> {
    let mut head = data.get(..HEADER)?;
    (&head[..4] == MAGIC).then_some(())?;
    head.advance(4);
    let crc = head.get_u32_le();
    (crc32fast::hash(&data[8..]) == crc).then_some(())?;
    let found = PageKey {
        path: head.get_u64_le(),
        version: head.get_u32_le(),
        index: head.get_u64_le(),
    };
    let len = head.get_u32_le() as usize;
    (found == key && data.len() - HEADER == len).then_some(())
}

/// Whether the page is on disk (good or not: that is for [`read`] to find out).
#[cfg(test)]
pub fn exists(dir: &Path, key: PageKey) -> bool {
    dir.join(key.file_name()).exists()
}

/// Writes the page (atomically: a temporary file renamed into place). Returns the
/// bytes it takes on disk.
pub fn write(dir: &Path, key: PageKey, data: &[u8]) -> io::Result<u64> {
    let mut out = Vec::with_capacity(HEADER + data.len());
    out.extend_from_slice(MAGIC);
    out.put_u32_le(0);
    out.put_u64_le(key.path);
    out.put_u32_le(key.version);
    out.put_u64_le(key.index);
    out.put_u32_le(data.len() as u32);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[8..]);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    let temp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        TEMP.fetch_add(1, Ordering::Relaxed)
    ));
    let written = fs::File::create(&temp)
        .and_then(|mut f| f.write_all(&out))
        .and_then(|()| fs::rename(&temp, dir.join(key.file_name())));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
    }
    written.map(|()| out.len() as u64)
}

/// Every page file in `dir` (temporary files of writers still at work are left out,
/// and ones left by a crash over an hour ago are removed).
pub fn list(dir: &Path) -> io::Result<Vec<PageFile>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            let stale = used.elapsed().is_ok_and(|age| age.as_secs() > 3600);
            if stale {
                let _ = fs::remove_file(entry.path());
            }
            continue;
        }
        out.push(PageFile {
            file: entry.path(),
            bytes: meta.len(),
            used,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: PageKey = PageKey {
        path: 7,
        version: 3,
        index: 1,
    };

    #[test]
    fn a_page_reads_back_and_a_damaged_one_is_removed_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let data = vec![0xab; 1000];
        write(dir.path(), KEY, &data).unwrap();
        assert_eq!(read(dir.path(), KEY), Some(data.clone()));
        let file = dir.path().join(KEY.file_name());
        let good = fs::read(&file).unwrap();
        for (what, bad) in [
            ("torn", good[..good.len() - 10].to_vec()),
            ("flipped", {
                let mut b = good.clone();
                b[HEADER + 500] ^= 1;
                b
            }),
            ("empty", Vec::new()),
        ] {
            fs::write(&file, &bad).unwrap();
            assert_eq!(read(dir.path(), KEY), None, "{what}");
            assert!(!file.exists(), "{what} page left on disk");
        }
        // Another page's file under this page's name is not this page.
        write(dir.path(), PageKey { index: 2, ..KEY }, &data).unwrap();
        fs::rename(
            dir.path().join(PageKey { index: 2, ..KEY }.file_name()),
            &file,
        )
        .unwrap();
        assert_eq!(read(dir.path(), KEY), None);
    }
}
