//! `build-plugin SRC.c OUT.wasm`: builds a file system plugin written in C against
//! the `fs-plugin` world of `wit/fs.wit` into a component (what `scripts/build-plugin`
//! runs). `build-plugin --sandbox SRC.c OUT.wasm` builds a guest of the `sandbox`
//! world instead (a command component that may mount at run time). Needs wit-bindgen
//! (`scripts/fetch-wit-bindgen`), clang-14, lld-14 and wasi-libc.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (world, reactor, files) = match &args[..] {
        [flag, rest @ ..] if flag == "--sandbox" => ("sandbox", false, rest),
        rest => ("fs-plugin", true, rest),
    };
    let [src, out] = files else {
        eprintln!("usage: build-plugin [--sandbox] SRC.c OUT.wasm");
        return ExitCode::from(2);
    };
    match wasm9p_tests::build_c_component(Path::new(src), world, reactor, Path::new(out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("build-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}
