//! `build-plugin SRC.c OUT.wasm`: builds a file system plugin written in C against
//! the `fs-plugin` world of `wit/fs.wit` into a component (what `scripts/build-plugin`
//! runs). `build-plugin --sandbox SRC.c OUT.wasm` builds a guest of the `sandbox`
//! world instead (a command component that may mount at run time), `build-plugin
//! --http SRC.c OUT.wasm` a `wasi:http/proxy` component (world `guest` of
//! `examples/http/wit`; what `scripts/build-http` runs) and `--http-p3` a WASI 0.3
//! HTTP component (world `guest` of `examples/http/wit-0.3`). Needs wit-bindgen
//! (`scripts/fetch-wit-bindgen`), clang-14, lld-14 and wasi-libc.

use std::path::Path;
use std::process::ExitCode;

/// What to build.
enum Kind {
    Plugin,
    Sandbox,
    Http,
    HttpP3,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (kind, files) = match &args[..] {
        [flag, rest @ ..] if flag == "--sandbox" => (Kind::Sandbox, rest),
        [flag, rest @ ..] if flag == "--http" => (Kind::Http, rest),
        [flag, rest @ ..] if flag == "--http-p3" => (Kind::HttpP3, rest),
        rest => (Kind::Plugin, rest),
    };
    let [src, out] = files else {
        eprintln!("usage: build-plugin [--sandbox | --http | --http-p3] SRC.c OUT.wasm");
        return ExitCode::from(2);
    };
    let (src, out) = (Path::new(src), Path::new(out));
    let built = match kind {
        Kind::Plugin => wasm9p_tests::build_c_plugin(src, out),
        Kind::Sandbox => wasm9p_tests::build_c_component(src, "sandbox", false, out),
        Kind::Http => wasm9p_tests::build_c_http(src, out),
        Kind::HttpP3 => wasm9p_tests::build_c_http_p3(src, out),
    };
    match built {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("build-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}
