//! What a wasm file exports at its top level, read without compiling it: the shim
//! tells a task's kind by it, and the HTTP handler which engines a component needs.
//!
//! Only the top level of the file is read, a section at a time: a core module's
//! exports come before its code, so clang.wasm's 75 MB are not read to find `_start`,
//! and a component's nested modules are skipped.

use std::io::{Read, Seek, SeekFrom};

use wasmparser::{Chunk, Encoding, Parser, Payload};

/// How much is read at a time.
const CHUNK: usize = 64 << 10;

/// What a wasm file exports at its top level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopLevel {
    /// A core module's exports.
    Module(Vec<String>),
    /// A component's exports.
    Component(Vec<String>),
}

/// The names `file` exports at its top level, read a section at a time (the error is
/// a few words: not wasm, truncated, what the parser said).
pub fn top_level_exports(mut file: impl Read + Seek) -> Result<TopLevel, String> {
    let mut magic = [0u8; 4];
    let read = read_full(&mut file, &mut magic)?;
    if read < 4 || magic != *b"\0asm" {
        return Err("not a wasm module or component (it does not start with \\0asm)".into());
    }
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut parser = Parser::new(0);
    let mut buf: Vec<u8> = Vec::new();
    let mut eof = false;
    let mut component = None;
    let mut names = Vec::new();
    loop {
        let (consumed, skip, done) = match parser.parse(&buf, eof) {
            Ok(Chunk::NeedMoreData(hint)) => {
                if eof {
                    return Err("truncated".into());
                }
                let want = usize::try_from(hint).unwrap_or(CHUNK).clamp(1, CHUNK);
                let start = buf.len();
                buf.resize(start + want, 0);
                let n = read_full(&mut file, &mut buf[start..])?;
                buf.truncate(start + n);
                eof = n < want;
                continue;
            }
            Ok(Chunk::Parsed { consumed, payload }) => match payload {
                Payload::Version { encoding, .. } => {
                    component = Some(encoding == Encoding::Component);
                    (consumed, 0, false)
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        names.push(export.map_err(|e| e.to_string())?.name.to_owned());
                    }
                    (consumed, 0, false)
                }
                Payload::ComponentExportSection(reader) => {
                    for export in reader {
                        names.push(export.map_err(|e| e.to_string())?.name.name.to_owned());
                    }
                    (consumed, 0, false)
                }
                // A module's exports are all read once its code begins.
                Payload::CodeSectionStart { .. } => (consumed, 0, true),
                // The parent parser has passed the nested one already: its bytes
                // are dropped unread.
                Payload::ModuleSection {
                    unchecked_range, ..
                }
                | Payload::ComponentSection {
                    unchecked_range, ..
                } => (consumed, unchecked_range.len(), false),
                Payload::End(_) => (consumed, 0, true),
                _ => (consumed, 0, false),
            },
            Err(e) => return Err(format!("not valid wasm: {}", e.message())),
        };
        if done {
            break;
        }
        buf.drain(..consumed);
        if skip > 0 {
            if buf.len() >= skip {
                buf.drain(..skip);
            } else {
                let beyond = (skip - buf.len()) as i64;
                buf.clear();
                file.seek(SeekFrom::Current(beyond))
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(match component {
        Some(true) => TopLevel::Component(names),
        _ => TopLevel::Module(names),
    })
}

/// Reads until `buf` is full or the file ends: how many bytes it got.
fn read_full(file: &mut impl Read, buf: &mut [u8]) -> Result<usize, String> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(got)
}
