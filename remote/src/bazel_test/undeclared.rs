//! What Bazel's `test-setup.sh` leaves of a test's undeclared outputs, made by the
//! worker: the zip of `TEST_UNDECLARED_OUTPUTS_DIR` (`TEST_UNDECLARED_OUTPUTS_ZIP`),
//! its manifest (`TEST_UNDECLARED_OUTPUTS_MANIFEST`) and the test's annotations
//! (`TEST_UNDECLARED_OUTPUTS_ANNOTATIONS`).
//!
//! - **The manifest**, made when there is a file: one line per file, in the order of
//!   their paths' bytes (the script's `find | sort`), `PATH<TAB>SIZE<TAB>MIME`, the
//!   path from the outputs' directory. The script asks `file --mime-type`; the worker
//!   tells the types of [`mime_type`], which give `file`'s answer for empty files,
//!   text, XML, JSON, wasm and what it cannot tell (`application/octet-stream`), and
//!   that answer for the rest. A symlink there is left out (of the zip too).
//! - **The annotations:** the files `*.part` at the top of
//!   `TEST_UNDECLARED_OUTPUTS_ANNOTATIONS_DIR`, in the order of their names,
//!   concatenated; none when there is no part (the script's `cat` of a glob that
//!   fails).

use crate::layer::{ActionFs, Inspected};
use crate::store::{ContentStore, Fetch};

use super::ResultsError;

/// A file found under a directory: its path from there, its permission bits and its
/// bytes.
pub(super) type Found = (String, u32, Vec<u8>);

/// The files under the directory `dir` of `fs` (symlinks left out), as the archive
/// of the undeclared outputs holds them: paths from `dir`, in order, each with its
/// permission bits and bytes. At most `limit` bytes in all.
pub(super) async fn files_under(
    fs: &ActionFs,
    dir: &str,
    limit: u64,
    store: &ContentStore,
    fetch: &dyn Fetch,
) -> Result<Vec<Found>, ResultsError> {
    let failed =
        |path: &str, e: &dyn std::fmt::Display| ResultsError::Failed(format!("{dir}/{path}: {e}"));
    let mut out = Vec::new();
    let mut total = 0u64;
    let Ok(node) = fs.resolve(dir) else {
        return Ok(out); // the test removed it: nothing to keep
    };
    let mut pending = vec![(String::new(), node)];
    while let Some((path, node)) = pending.pop() {
        let (file, size, executable) = match fs.inspect(node).map_err(|e| failed(&path, &e))? {
            Inspected::Dir(entries) => {
                for (name, child) in entries.into_iter().rev() {
                    let child_path = match path.is_empty() {
                        true => name,
                        false => format!("{path}/{name}"),
                    };
                    pending.push((child_path, child));
                }
                continue;
            }
            Inspected::Symlink(_) => continue,
            // A file of the input root moved there by the test.
            Inspected::TreeFile { digest, executable } => {
                let file = store
                    .get(digest, fetch)
                    .await
                    .map_err(|e| failed(&path, &e))?;
                (file, digest.size(), executable)
            }
            Inspected::MadeFile {
                file,
                size,
                executable,
            } => (file, size, executable),
        };
        total += size;
        if total > limit {
            return Err(ResultsError::TooLarge(format!("{limit} bytes")));
        }
        let mut bytes = vec![0u8; size as usize];
        std::os::unix::fs::FileExt::read_exact_at(&*file, &mut bytes, 0)
            .map_err(|e| failed(&path, &e))?;
        out.push((path, if executable { 0o755 } else { 0o644 }, bytes));
    }
    Ok(out)
}

/// The manifest of the undeclared outputs `files` (see the module's doc); `None`
/// when there are none.
pub(super) fn manifest(files: &[Found]) -> Option<String> {
    let mut lines: Vec<(&str, String)> = files
        .iter()
        .map(|(path, _, bytes)| {
            let line = format!("{path}\t{}\t{}\n", bytes.len(), mime_type(bytes));
            (path.as_str(), line)
        })
        .collect();
    lines.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let text: String = lines.into_iter().map(|(_, line)| line).collect();
    (!text.is_empty()).then_some(text)
}

/// The annotations of the parts in `files` (the annotations directory's, see the
/// module's doc); `None` when there is no part.
pub(super) fn annotations(files: &[Found]) -> Option<Vec<u8>> {
    let mut parts: Vec<&Found> = files
        .iter()
        .filter(|(path, _, _)| !path.contains('/') && path.ends_with(".part"))
        .collect();
    parts.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    (!parts.is_empty()).then(|| {
        parts
            .iter()
            .flat_map(|(_, _, bytes)| bytes.clone())
            .collect()
    })
}

/// The MIME type of a file whose bytes are `bytes`, as `file --mime-type` names it:
/// empty, wasm, XML, JSON and plain text told apart, anything else
/// `application/octet-stream`.
pub fn mime_type(bytes: &[u8]) -> &'static str {
    if bytes.is_empty() {
        return "inode/x-empty";
    }
    if bytes.starts_with(b"\0asm") {
        return "application/wasm";
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return "application/octet-stream";
    };
    // Text is what has no control character but the usual blanks.
    if text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c'))
    {
        return "application/octet-stream";
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with("<?xml") {
        return "text/xml";
    }
    if trimmed.starts_with(['{', '[']) && serde_json::from_str::<serde_json::Value>(text).is_ok() {
        return "application/json";
    }
    "text/plain"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_lists_files_in_path_order_with_sizes_and_types() {
        let found = |path: &str, bytes: &[u8]| (path.to_owned(), 0o644, bytes.to_vec());
        let files = [
            found("a/b", b"x\n"),
            found("a.txt", b"hello\n"),
            found("blob.bin", b"\0\x01\x02\xff"),
            found("empty", b""),
        ];
        assert_eq!(
            manifest(&files).unwrap(),
            "a.txt\t6\ttext/plain\na/b\t2\ttext/plain\nblob.bin\t4\t\
             application/octet-stream\nempty\t0\tinode/x-empty\n"
        );
        assert_eq!(manifest(&[]), None);
    }

    #[test]
    fn the_annotations_are_the_top_level_parts_in_name_order() {
        let found = |path: &str, bytes: &[u8]| (path.to_owned(), 0o644, bytes.to_vec());
        let files = [
            found("z.part", b"last\n"),
            found("a.part", b"first\n"),
            found("notes.txt", b"not a part\n"),
            found("sub/b.part", b"not at the top\n"),
        ];
        assert_eq!(annotations(&files).unwrap(), b"first\nlast\n");
        assert_eq!(annotations(&files[2..]), None);
    }

    #[test]
    fn mime_types_are_file_s_for_what_it_tells_apart() {
        // What `file -L -b --mime-type` (Debian's file 5.44) says of each.
        for (bytes, mime) in [
            (&b""[..], "inode/x-empty"),
            (b"hello\n", "text/plain"),
            ("caf\u{e9}\n".as_bytes(), "text/plain"),
            (b"\0\x01\x02\x03\xff", "application/octet-stream"),
            (b"\0asm\x01\0\0\0", "application/wasm"),
            (b"<?xml version=\"1.0\"?>\n<a/>\n", "text/xml"),
            (b"{\"a\": 1}\n", "application/json"),
            (b"\x89PNG\r\n\x1a\n", "application/octet-stream"),
        ] {
            assert_eq!(mime_type(bytes), mime, "{bytes:?}");
        }
    }
}
