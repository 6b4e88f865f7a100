//! A zip archive of stored (uncompressed) files: what a Bazel test's undeclared
//! outputs become (`outputs.zip`, which Bazel unpacks into `test.outputs/`).
//!
//! The format as PKWARE's APPNOTE gives it, its plain subset: for each file a local
//! header and the bytes, then the central directory and its end record. Names are
//! UTF-8 (flag bit 11), with their Unix permission bits; every time is the format's
//! earliest (1980-01-01 00:00), so the same files make the same archive. No ZIP64:
//! an archive past 4 GiB or 65,535 files is refused.

/// Why files cannot be one archive.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ZipError {
    /// Past what a zip without ZIP64 holds.
    #[error("undeclared outputs past a zip's 4 GiB or 65,535 files")]
    TooLarge,
}

const LOCAL: u32 = 0x0403_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const END: u32 = 0x0605_4b50;
/// Version 2.0: what stored files need.
const VERSION: u16 = 20;
/// Made on Unix (the upper byte), version 2.0.
const MADE_BY: u16 = 3 << 8 | VERSION;
/// Names in UTF-8.
const UTF8: u16 = 1 << 11;
/// 1980-01-01 in MS-DOS date form (00:00 is 0).
const DOS_DATE: u16 = (1 << 5) | 1;

/// One file: its path in the archive (`/`-separated), its permission bits, its bytes.
pub struct Entry<'a> {
    /// Its path.
    pub name: &'a str,
    /// Its Unix permission bits.
    pub mode: u32,
    /// Its bytes.
    pub bytes: &'a [u8],
}

/// The archive of `entries`, in their order.
pub fn archive(entries: &[Entry<'_>]) -> Result<Vec<u8>, ZipError> {
    let count = u16::try_from(entries.len()).map_err(|_| ZipError::TooLarge)?;
    let mut out = Vec::new();
    let mut central = Vec::new();
    for entry in entries {
        let offset = u32::try_from(out.len()).map_err(|_| ZipError::TooLarge)?;
        let size = u32::try_from(entry.bytes.len()).map_err(|_| ZipError::TooLarge)?;
        let name = entry.name.as_bytes();
        let name_len = u16::try_from(name.len()).map_err(|_| ZipError::TooLarge)?;
        let crc = crc32fast::hash(entry.bytes);
        // Both headers share these fields, from "version needed" to the name's length.
        let mut common = Vec::with_capacity(26);
        for half in [VERSION, UTF8, 0, 0, DOS_DATE] {
            common.extend_from_slice(&half.to_le_bytes());
        }
        for word in [crc, size, size] {
            common.extend_from_slice(&word.to_le_bytes());
        }
        common.extend_from_slice(&name_len.to_le_bytes());

        out.extend_from_slice(&LOCAL.to_le_bytes());
        out.extend_from_slice(&common);
        out.extend_from_slice(&0u16.to_le_bytes()); // no extra field
        out.extend_from_slice(name);
        out.extend_from_slice(entry.bytes);

        central.extend_from_slice(&CENTRAL.to_le_bytes());
        central.extend_from_slice(&MADE_BY.to_le_bytes());
        central.extend_from_slice(&common);
        for half in [0u16, 0, 0, 0] {
            // no extra field, no comment, disk 0, no internal attributes
            central.extend_from_slice(&half.to_le_bytes());
        }
        let external = (0o100_000 | (entry.mode & 0o7777)) << 16; // a regular file
        central.extend_from_slice(&external.to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name);
    }
    let central_at = u32::try_from(out.len()).map_err(|_| ZipError::TooLarge)?;
    let central_len = u32::try_from(central.len()).map_err(|_| ZipError::TooLarge)?;
    // The end record's offsets must fit too.
    if central_at.checked_add(central_len).is_none() {
        return Err(ZipError::TooLarge);
    }
    out.extend_from_slice(&central);
    out.extend_from_slice(&END.to_le_bytes());
    for half in [0u16, 0, count, count] {
        out.extend_from_slice(&half.to_le_bytes());
    }
    out.extend_from_slice(&central_len.to_le_bytes());
    out.extend_from_slice(&central_at.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // no comment
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn an_archive_unzips_to_its_files_with_their_names_bytes_and_modes() {
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let entries = [
            Entry {
                name: "a.txt",
                mode: 0o644,
                bytes: b"first\n",
            },
            Entry {
                name: "sub/dir/b\u{e9}.bin",
                mode: 0o755,
                bytes: &big,
            },
            Entry {
                name: "empty",
                mode: 0o600,
                bytes: b"",
            },
        ];
        let zip = archive(&entries).unwrap();
        // Python's zipfile, an independent reader, checks every CRC and reads it back.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outputs.zip");
        std::fs::write(&path, &zip).unwrap();
        let script = "import sys, zipfile\n\
             z = zipfile.ZipFile(sys.argv[1])\n\
             assert z.testzip() is None\n\
             for i in z.infolist():\n\
             \x20   print(i.filename, oct(i.external_attr >> 16), len(z.read(i)), sum(z.read(i)))\n";
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(&path)
            .output()
            .expect("python3");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let big_sum: u64 = big.iter().map(|b| *b as u64).sum();
        let first_sum: u64 = b"first\n".iter().map(|b| *b as u64).sum();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!(
                "a.txt 0o100644 6 {first_sum}\nsub/dir/b\u{e9}.bin 0o100755 100000 {big_sum}\n\
                 empty 0o100600 0 0\n"
            )
        );
        // The same files make the same archive.
        assert_eq!(archive(&entries).unwrap(), zip);
    }

    #[test]
    fn no_files_make_an_empty_archive_and_too_many_are_refused() {
        assert_eq!(archive(&[]).unwrap().len(), 22);
        let many: Vec<Entry> = (0..70_000)
            .map(|_| Entry {
                name: "x",
                mode: 0o644,
                bytes: b"",
            })
            .collect();
        assert_eq!(archive(&many), Err(ZipError::TooLarge));
    }
}
