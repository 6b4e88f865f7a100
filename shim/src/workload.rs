//! What a task's wasm file is, told by what it exports (as runwasi's shims tell it):
//! a preview1 module runs `_start` to its end; a component that exports
//! `wasi:http/incoming-handler@0.2.x` or `wasi:http/handler@0.3.x` is served, an
//! instance per request; one that exports `wasi:cli/run` runs to its end. A component
//! with both an HTTP handler and `run` is served. Anything else is refused with the
//! one line a user needs.
//!
//! The file is read as [`wasm9p_host::engine::top_level_exports`] reads it: its top
//! level only.

use std::io::{Read, Seek};

use wasm9p_host::engine::{top_level_exports, TopLevel};
use wasm9p_host::http::HandlerKind;

/// What a task runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// A preview1 module: `_start`, to its end.
    Module,
    /// A component exporting `wasi:cli/run`: to its end.
    CliComponent,
    /// A component exporting an HTTP handler: served, an instance per request, on
    /// the engines of its kind.
    HttpComponent(HandlerKind),
}

impl Workload {
    /// Whether it serves requests rather than running to its end.
    pub fn serves(self) -> bool {
        matches!(self, Workload::HttpComponent(_))
    }
}

/// The names a 0.2 proxy's and a 0.3 service's handler are exported by, without
/// their version.
const HTTP_EXPORTS: [&str; 2] = ["wasi:http/incoming-handler", "wasi:http/handler"];

/// The name of a command component's export, without its version.
const RUN_EXPORT: &str = "wasi:cli/run";

/// Tells what `file` (named `name` in errors) is; the error is one line.
pub fn classify(name: &str, file: impl Read + Seek) -> Result<Workload, String> {
    let exports = top_level_exports(file).map_err(|why| format!("{name}: {why}"))?;
    match exports {
        TopLevel::Module(names) if names.iter().any(|n| n == "_start") => Ok(Workload::Module),
        TopLevel::Module(_) => Err(format!(
            "{name}: a preview1 module without `_start` (a reactor) has nothing to run"
        )),
        TopLevel::Component(names) => {
            let exported = |wanted: &str| {
                names
                    .iter()
                    .any(|n| n.split_once('@').map_or(n.as_str(), |(bare, _)| bare) == wanted)
            };
            if let Some(kind) = HandlerKind::of_exports(&names) {
                Ok(Workload::HttpComponent(kind))
            } else if HTTP_EXPORTS.iter().any(|e| exported(e)) {
                // A version of either nobody serves: loading it says so.
                Ok(Workload::HttpComponent(HandlerKind::Service))
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
            Ok(Workload::HttpComponent(HandlerKind::Proxy))
        );
        assert_eq!(
            classify_wat(&component("wasi:http/handler@0.3.0-rc-2025-09-16")),
            Ok(Workload::HttpComponent(HandlerKind::Service))
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
