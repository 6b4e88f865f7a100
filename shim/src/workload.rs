//! What a task's wasm file is, told by what it exports (as runwasi's shims tell it):
//! a preview1 module runs `_start` to its end; a component that exports
//! `wasi:http/incoming-handler@0.2.x` or `wasi:http/handler@0.3.x` is served, an
//! instance per request; one that exports `wasi:cli/run` runs to its end. A component
//! with both an HTTP handler and `run` is served. Anything else is refused with the
//! one line a user needs.
//!
//! Only the top level of the file is read, a section at a time: a core module's
//! exports come before its code, so clang.wasm's 75 MB are not read to find `_start`,
//! and a component's nested modules are skipped.

use std::io::{Read, Seek, SeekFrom};

use wasmparser::{Chunk, Encoding, Parser, Payload};

/// What a task runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A preview1 module: `_start`, to its end.
    Module,
    /// A component exporting `wasi:cli/run`: to its end.
    CliComponent,
    /// A component exporting an HTTP handler: served, an instance per request.
    HttpComponent,
}

impl Workload {
    /// Whether it serves requests rather than running to its end.
    pub fn serves(self) -> bool {
        self == Workload::HttpComponent
    }
}

/// The names a 0.2 proxy's and a 0.3 service's handler are exported by, without
/// their version.
const HTTP_EXPORTS: [&str; 2] = ["wasi:http/incoming-handler", "wasi:http/handler"];

/// The name of a command component's export, without its version.
const RUN_EXPORT: &str = "wasi:cli/run";

/// How much is read at a time.
const CHUNK: usize = 64 << 10;

/// Tells what `file` (named `name` in errors) is; the error is one line.
pub fn classify(name: &str, file: impl Read + Seek) -> Result<Workload, String> {
    let exports = top_level_exports(file).map_err(|why| format!("{name}: {why}"))?;
    match exports {
        Exports::Module(names) if names.iter().any(|n| n == "_start") => Ok(Workload::Module),
        Exports::Module(_) => Err(format!(
            "{name}: a preview1 module without `_start` (a reactor) has nothing to run"
        )),
        Exports::Component(names) => {
            let exported = |wanted: &str| {
                names
                    .iter()
                    .any(|n| n.split_once('@').map_or(n.as_str(), |(bare, _)| bare) == wanted)
            };
            if HTTP_EXPORTS.iter().any(|e| exported(e)) {
                Ok(Workload::HttpComponent)
            } else if exported(RUN_EXPORT) {
                Ok(Workload::CliComponent)
            } else {
                Err(format!(
                    "{name}: a component that exports neither {RUN_EXPORT} nor an HTTP handler \
                     ({}); it exports: {}",
                    HTTP_EXPORTS.join(" or "),
                    if names.is_empty() {
                        "nothing".into()
                    } else {
                        names.join(", ")
                    }
                ))
            }
        }
    }
}

enum Exports {
    Module(Vec<String>),
    Component(Vec<String>),
}

/// The names the file exports at its top level.
fn top_level_exports(mut file: impl Read + Seek) -> Result<Exports, String> {
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
        Some(true) => Exports::Component(names),
        _ => Exports::Module(names),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn classify_wat(wat: &str) -> Result<Workload, String> {
        classify("/app.wasm", Cursor::new(wat::parse_str(wat).unwrap()))
    }

    #[test]
    fn modules_and_components_are_told_by_their_exports() {
        assert_eq!(
            classify_wat(r#"(module (func (export "_start")) (memory (export "memory") 1))"#),
            Ok(Workload::Module)
        );
        let err = classify_wat(r#"(module (func (export "_initialize")))"#).unwrap_err();
        assert!(err.contains("without `_start`"), "{err}");

        // Exports are read from the top level only: a nested module exporting
        // anything changes nothing.
        let component = |export: &str| {
            format!(
                r#"(component
                    (core module $m (func (export "run")) (func (export "_start")))
                    (core instance $i (instantiate $m))
                    (func $run (result (result)) (canon lift (core func $i "run")))
                    (instance $exported (export "run" (func $run)))
                    (export "{export}" (instance $exported)))"#
            )
        };
        assert_eq!(
            classify_wat(&component("wasi:cli/run@0.2.0")),
            Ok(Workload::CliComponent)
        );
        assert_eq!(
            classify_wat(&component("wasi:http/incoming-handler@0.2.3")),
            Ok(Workload::HttpComponent)
        );
        assert_eq!(
            classify_wat(&component("wasi:http/handler@0.3.0-rc-2025-09-16")),
            Ok(Workload::HttpComponent)
        );
        let err = classify_wat(&component("example:thing/api@1.0.0")).unwrap_err();
        assert!(
            err.starts_with("/app.wasm: a component that exports neither wasi:cli/run")
                && err.ends_with("it exports: example:thing/api@1.0.0"),
            "{err}"
        );
    }

    #[test]
    fn what_is_not_wasm_says_so_in_one_line() {
        for (bytes, needle) in [
            (
                &b"<!doctype html>\n<p>hi</p>\n"[..],
                "not a wasm module or component",
            ),
            (
                &b"\x7fELF\x02\x01\x01"[..],
                "not a wasm module or component",
            ),
            (&b""[..], "not a wasm module or component"),
            (&b"\0asm\x01\0\0\0\x07\xff\xff"[..], "not valid wasm"),
        ] {
            let err = classify("/app.wasm", Cursor::new(bytes)).unwrap_err();
            assert!(
                err.starts_with("/app.wasm: ") && err.contains(needle) && !err.contains('\n'),
                "{err}"
            );
        }
    }

    #[test]
    fn a_modules_code_is_not_read_to_find_its_exports() {
        // A module whose code section is cut short: its exports are known before it.
        let mut bytes = wat::parse_str(
            r#"(module (func (export "_start")) (func $f (result i32) i32.const 7))"#,
        )
        .unwrap();
        bytes.truncate(bytes.len() - 3);
        assert_eq!(
            classify("/big.wasm", Cursor::new(bytes)),
            Ok(Workload::Module)
        );
    }
}
