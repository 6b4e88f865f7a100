//! clang.wasm's tools run as guests: the multi-call module's [`Tool`]s by the names a
//! build system calls them, and one [`Invocation`] of a tool, the compiler driver run
//! job by job. `wasm9p cc`, its daemon and the build farm's worker all run tools
//! through it; so can a runtime that embeds the engine.
//!
//! clang.wasm (the npm package `@yowasp/clang`) is one multi-call module: `argv[1]`
//! names the tool (`clang`, `clang++`, `wasm-ld`, `ar`, ...). It cannot start
//! processes, so the compiler driver is run twice over: once with `-###`, which prints
//! the jobs it would run (`jobs`), then each job as a guest of its own, in order,
//! stopping at the first that fails, as the native driver would. What the driver
//! prints for the user (warnings, and everything with `-v`) is relayed; a query that
//! makes no jobs (`--version`, `-print-file-name=`, an error in the arguments) is
//! answered by the driver run plainly. Dependency files a job writes are pointed at
//! the host's toolchain headers (`depfile`). The other tools run as one guest each.
//!
//! - `mod.rs`: [`Tool`], [`TOOLS`];
//! - `invocation.rs`: [`Invocation`] (its guests on a prepared engine, with the stdio
//!   of whoever asked: [`Io`]);
//! - `jobs.rs`: the driver's `-###` output read as jobs;
//! - `depfile.rs`: make-style dependency files from guest paths to host paths.

mod depfile;
mod invocation;
mod jobs;

pub use invocation::{Invocation, Io};

/// A tool of the multi-call module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tool {
    /// The compiler driver (`clang` or `clang++`), run job by job.
    Driver(&'static str),
    /// Any other tool, run as one guest (`ar`, `wasm-ld`, ...).
    Direct(&'static str),
}

/// Names a build system calls, and the tool each is.
pub const TOOLS: &[(&str, Tool)] = &[
    ("cc", Tool::Driver("clang")),
    ("c++", Tool::Driver("clang++")),
    ("clang", Tool::Driver("clang")),
    ("clang++", Tool::Driver("clang++")),
    ("gcc", Tool::Driver("clang")),
    ("g++", Tool::Driver("clang++")),
    ("ar", Tool::Direct("ar")),
    ("ranlib", Tool::Direct("ranlib")),
    ("ld", Tool::Direct("wasm-ld")),
    ("wasm-ld", Tool::Direct("wasm-ld")),
    ("nm", Tool::Direct("nm")),
    ("objdump", Tool::Direct("objdump")),
    ("objcopy", Tool::Direct("objcopy")),
    ("strip", Tool::Direct("strip")),
    ("size", Tool::Direct("size")),
    ("readelf", Tool::Direct("readelf")),
    ("readobj", Tool::Direct("readobj")),
    ("addr2line", Tool::Direct("addr2line")),
    ("symbolizer", Tool::Direct("symbolizer")),
    ("c++filt", Tool::Direct("c++filt")),
];

impl Tool {
    /// The tool a subcommand or a command's file name names: `cc`, `c++`, `ar`, ...,
    /// also with an `llvm-` or a target prefix (`llvm-ar`, `wasm32-wasi-clang`).
    pub fn named(name: &str) -> Option<Tool> {
        let name = name.strip_prefix("llvm-").unwrap_or(name);
        // The longest name that is all of it or its last dash-separated part.
        TOOLS
            .iter()
            .filter(|(tool, _)| {
                name == *tool
                    || name
                        .strip_suffix(tool)
                        .is_some_and(|prefix| prefix.ends_with('-'))
            })
            .max_by_key(|(tool, _)| tool.len())
            .map(|&(_, tool)| tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_known_by_their_names_and_prefixed_names() {
        assert_eq!(Tool::named("cc"), Some(Tool::Driver("clang")));
        assert_eq!(Tool::named("c++"), Some(Tool::Driver("clang++")));
        assert_eq!(
            Tool::named("wasm32-wasi-clang++"),
            Some(Tool::Driver("clang++"))
        );
        assert_eq!(
            Tool::named("wasm32-wasi-c++"),
            Some(Tool::Driver("clang++"))
        );
        assert_eq!(Tool::named("llvm-ar"), Some(Tool::Direct("ar")));
        assert_eq!(
            Tool::named("wasm32-wasip1-ranlib"),
            Some(Tool::Direct("ranlib"))
        );
        assert_eq!(Tool::named("ld"), Some(Tool::Direct("wasm-ld")));
        assert_eq!(Tool::named("wasm-ld"), Some(Tool::Direct("wasm-ld")));
        assert_eq!(Tool::named("make"), None);
        assert_eq!(Tool::named("xcc"), None);
    }
}
