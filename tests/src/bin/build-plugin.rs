//! `build-plugin SRC.c OUT.wasm`: builds a file system plugin written in C against
//! the `fs-plugin` world of `wit/fs.wit` into a component (what `scripts/build-plugin`
//! runs). Needs wit-bindgen (`scripts/fetch-wit-bindgen`), clang-14, lld-14 and
//! wasi-libc.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [src, out] = &args[..] else {
        eprintln!("usage: build-plugin SRC.c OUT.wasm");
        return ExitCode::from(2);
    };
    match wasm9p_tests::build_c_plugin(Path::new(src), Path::new(out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("build-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}
