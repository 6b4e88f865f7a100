//! clang.wasm from the npm package `@yowasp/clang`, fetched once by
//! `scripts/fetch-clang-wasm` into a cache outside the repository.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where the fetched package lives.
#[derive(Clone, Debug)]
pub struct ClangWasm {
    /// The WASI preview1 module (LLVM's multi-call binary: `argv[1]` names the tool).
    pub module: PathBuf,
    /// A directory holding `usr/` (clang's headers and the WASI sysroot), which clang
    /// expects at `/usr` in the guest.
    pub sysroot: PathBuf,
}

/// Fetches clang.wasm on first use (npm must be installed; `scripts/test` makes sure),
/// then returns the cached copy.
pub fn clang_wasm() -> ClangWasm {
    static FETCHED: OnceLock<ClangWasm> = OnceLock::new();
    FETCHED
        .get_or_init(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-clang-wasm");
            let out = Command::new(&script)
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
            assert!(
                out.status.success(),
                "scripts/fetch-clang-wasm failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            ClangWasm {
                module: dir.join("llvm.core.wasm"),
                sysroot: dir.join("sysroot"),
            }
        })
        .clone()
}

/// The words of the one `-cc1` line that `clang -###` prints (each word double-quoted,
/// `\"`, `\\` and `\$` escaped), without the leading empty `argv[0]` clang puts there
/// when it runs in process; `None` when there is no such line.
pub fn parse_cc1_line(hash3_output: &str) -> Option<Vec<String>> {
    let line = hash3_output
        .lines()
        .find(|l| l.starts_with(' ') && l.contains("\"-cc1\""))?;
    let mut words = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut word = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => word.push(chars.next()?),
                other => word.push(other),
            }
        }
        words.push(word);
    }
    if words.first().is_some_and(String::is_empty) {
        words.remove(0);
    }
    Some(words)
}

/// zstd's sources with its CMake build (`build/cmake`), as the `zstd-sys` crate ships
/// them: a real C project for the build-system tests. `zstd-sys` is in this
/// workspace's dependency graph (through wasmtime), so cargo has unpacked it in its
/// registry; the newest copy there is taken.
pub fn zstd_sources() -> PathBuf {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let mut found: Vec<PathBuf> = std::fs::read_dir(cargo_home.join("registry/src"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|index| {
            std::fs::read_dir(index.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .filter(|krate| krate.file_name().to_string_lossy().starts_with("zstd-sys-"))
        .map(|krate| krate.path().join("zstd"))
        .filter(|zstd| zstd.join("build/cmake/CMakeLists.txt").is_file())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "no zstd-sys sources under {}/registry/src (cargo fetch unpacks them)",
            cargo_home.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cc1_words_are_unquoted_and_the_empty_argv0_dropped() {
        let out = "clang version 22\nTarget: wasm32\n (in-process)\n \"\" \"clang\" \"-cc1\" \"-D\" \"A=\\\"b c\\\"\" \"-o\" \"/src/x.o\"\n";
        assert_eq!(
            parse_cc1_line(out).unwrap(),
            vec!["clang", "-cc1", "-D", "A=\"b c\"", "-o", "/src/x.o"]
        );
        assert_eq!(parse_cc1_line("no command here\n"), None);
        assert_eq!(parse_cc1_line(" \"-cc1\" \"unterminated"), None);
    }
}
