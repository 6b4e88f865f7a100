//! `build-plugin SRC.c OUT.wasm`: builds a file system plugin written in C against
//! the `fs-plugin` world of `wit/fs.wit` into a component (what `scripts/build-plugin`
//! runs). `build-plugin --sandbox SRC.c OUT.wasm` builds a guest of the `sandbox`
//! world instead (a command component that may mount at run time), and `build-plugin
//! --http SRC.c OUT.wasm` a `wasi:http/proxy` component (world `guest` of
//! `examples/http/wit`; what `scripts/build-http` runs). Needs wit-bindgen
//! (`scripts/fetch-wit-bindgen`), clang-14, lld-14 and wasi-libc.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (world, files) = match &args[..] {
        [flag, rest @ ..] if flag == "--sandbox" => (Some("sandbox"), rest),
        [flag, rest @ ..] if flag == "--http" => (None, rest),
        rest => (Some("fs-plugin"), rest),
    };
    let [src, out] = files else {
        eprintln!("usage: build-plugin [--sandbox | --http] SRC.c OUT.wasm");
        return ExitCode::from(2);
    };
    let (src, out) = (Path::new(src), Path::new(out));
    let built = match world {
        Some(world) => wasm9p_tests::build_c_component(src, world, world == "fs-plugin", out),
        None => wasm9p_tests::build_c_http(src, out),
    };
    match built {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("build-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}
