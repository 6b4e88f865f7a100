//! Which handler a component serves with, told from its exports before it is
//! compiled, since the engines differ: a 0.2 proxy's instances make one call at a
//! time, so its engines have wasmtime's concurrency support off (a store then sets
//! none of it up, and no call into or out of the guest pays for the component
//! model's task bookkeeping: a fifth more requests a second on a fixed answer, see
//! BENCHMARKS.md §13); a 0.3 service's run concurrent tasks and need it on.

use std::path::Path;

use crate::engine::{top_level_exports, TopLevel};

/// A 0.2 proxy's export, without its version.
pub(crate) const INCOMING_HANDLER: &str = "wasi:http/incoming-handler";

/// A 0.3 service's export, without its version.
pub(crate) const HANDLER: &str = "wasi:http/handler";

/// Which handler a component exports, and so the engines it is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandlerKind {
    /// `wasi:http/incoming-handler@0.2.x`: engines without concurrency support.
    Proxy,
    /// `wasi:http/handler@0.3.x`: engines with it. Also what a component of unknown
    /// kind is compiled for, since they run either.
    Service,
}

impl HandlerKind {
    /// The handler among a component's top-level export names: the 0.2 one when it
    /// has both (as that is the one served), `None` when it has neither.
    pub fn of_exports(names: &[String]) -> Option<HandlerKind> {
        let exported = |prefix: String| names.iter().any(|name| name.starts_with(&prefix));
        if exported(format!("{INCOMING_HANDLER}@0.2.")) {
            Some(HandlerKind::Proxy)
        } else if exported(format!("{HANDLER}@0.3.")) {
            Some(HandlerKind::Service)
        } else {
            None
        }
    }

    /// The handler the wasm file at `path` exports, read without compiling it; a
    /// file that cannot be read, or is not such a component, is taken for a service
    /// (loading it then says what is wrong).
    pub fn of_file(path: &Path) -> HandlerKind {
        let exports = std::fs::File::open(path)
            .map_err(|e| e.to_string())
            .and_then(top_level_exports);
        match exports {
            Ok(TopLevel::Component(names)) => {
                HandlerKind::of_exports(&names).unwrap_or(HandlerKind::Service)
            }
            _ => HandlerKind::Service,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_is_told_from_a_service_by_its_exports_and_a_proxy_wins_a_tie() {
        let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let kind = |list: &[&str]| HandlerKind::of_exports(&names(list));
        assert_eq!(
            kind(&["wasi:http/incoming-handler@0.2.3"]),
            Some(HandlerKind::Proxy)
        );
        assert_eq!(
            kind(&["wasi:http/handler@0.3.0-rc-2025-09-16"]),
            Some(HandlerKind::Service)
        );
        assert_eq!(
            kind(&[
                "wasi:http/handler@0.3.0-rc-2025-09-16",
                "wasi:http/incoming-handler@0.2.0"
            ]),
            Some(HandlerKind::Proxy)
        );
        assert_eq!(kind(&["wasi:cli/run@0.2.0"]), None);
        assert_eq!(kind(&["wasi:http/handler@0.2.0"]), None);
    }

    #[test]
    fn a_file_that_is_not_a_proxy_is_taken_for_a_service() {
        let dir = tempfile::tempdir().unwrap();
        let proxy = dir.path().join("proxy.wasm");
        std::fs::write(
            &proxy,
            wat::parse_str(
                r#"(component
                    (core module $m (func (export "f")))
                    (core instance $i (instantiate $m))
                    (func $f (canon lift (core func $i "f")))
                    (instance $e (export "handle" (func $f)))
                    (export "wasi:http/incoming-handler@0.2.0" (instance $e)))"#,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(HandlerKind::of_file(&proxy), HandlerKind::Proxy);
        let page = dir.path().join("index.html");
        std::fs::write(&page, "<p>hi</p>").unwrap();
        for path in [page, dir.path().join("missing.wasm")] {
            assert_eq!(HandlerKind::of_file(&path), HandlerKind::Service);
        }
    }
}
