//! C guests: compiled with Debian's clang for wasm32-wasi (clang-14, lld-14, wasi-libc,
//! libclang-rt-14-dev-wasm32, which `scripts/test` installs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The test guest `name` (`tests/guests/NAME`: C sources shared by every crate's
/// tests).
pub fn guest_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("guests")
        .join(name)
}

/// Compiles one C file to a wasm32-wasi command module; each call gets its own output
/// file, so tests running in parallel never race on one.
pub fn compile_c_guest(src: &Path) -> PathBuf {
    let out = output_for(src, "");
    let output = Command::new("clang-14")
        .args(["--target=wasm32-wasi", "--sysroot=/usr", "-O1", "-o"])
        .arg(&out)
        .arg(src)
        .output()
        .expect("clang-14 for wasm32-wasi (scripts/test installs clang-14, lld-14, wasi-libc, libclang-rt-14-dev-wasm32)");
    assert!(
        output.status.success(),
        "compiling {}: {}",
        src.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

/// Turns a wasm32-wasi core module into a WASI preview2 component with the preview1
/// command adapter (what `wasm-tools component new --adapt` does); the component is
/// written next to the module.
pub fn componentize(module: &Path) -> PathBuf {
    let out = module.with_extension("component.wasm");
    encode_component(
        module,
        wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
        &out,
    );
    out
}

/// A core module and the preview1 `adapter` (command or reactor) as a component at `out`.
fn encode_component(module: &Path, adapter: &[u8], out: &Path) {
    let bytes = std::fs::read(module).unwrap();
    let component = wit_component::ComponentEncoder::default()
        .module(&bytes)
        .and_then(|e| e.validate(true).adapter("wasi_snapshot_preview1", adapter))
        .and_then(|e| e.encode())
        .unwrap_or_else(|e| panic!("componentizing {}: {e:#}", module.display()));
    std::fs::write(out, component).unwrap();
}

/// The wit-bindgen command: `$WASM9P_WIT_BINDGEN`, else what
/// `scripts/fetch-wit-bindgen` installs in `target/wit-bindgen`.
pub fn wit_bindgen() -> PathBuf {
    std::env::var_os("WASM9P_WIT_BINDGEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/wit-bindgen/bin/wit-bindgen")
        })
}

/// Builds a file system plugin written in C (world `fs-plugin` of `wit/fs.wit`) into
/// the component `out`: wit-bindgen's C bindings, clang-14 for wasm32-wasi as a
/// reactor, then wit-component with the preview1 reactor adapter.
pub fn build_c_plugin(src: &Path, out: &Path) -> Result<(), String> {
    build_c_component(src, "fs-plugin", true, out)
}

/// Builds C against `world` of `wit/fs.wit` into the component `out`: a reactor (a
/// plugin) or a command (a guest, `main`), with the matching preview1 adapter.
pub fn build_c_component(src: &Path, world: &str, reactor: bool, out: &Path) -> Result<(), String> {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    build_c_component_of(&wit, src, world, reactor, out)
}

/// Builds a `wasi:http/proxy` component written in C (world `guest` of
/// `examples/http/wit`) into `out`: a reactor whose export is the handler.
pub fn build_c_http(src: &Path, out: &Path) -> Result<(), String> {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/http/wit");
    build_c_component_of(&wit, src, "guest", true, out)
}

/// Builds a WASI 0.3 HTTP component written in C (world `guest` of
/// `examples/http/wit-0.3`, exporting `wasi:http/handler@0.3.0`) into `out`.
pub fn build_c_http_p3(src: &Path, out: &Path) -> Result<(), String> {
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/http/wit-0.3");
    build_c_component_of(&wit, src, "guest", true, out)
}

/// [`build_c_http`] into the tests' guest directory; each call gets its own file.
pub fn c_http(src: &Path) -> PathBuf {
    let out = output_for(src, "-http");
    build_c_http(src, &out).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    out
}

/// [`build_c_http_p3`] into the tests' guest directory; each call gets its own file.
pub fn c_http_p3(src: &Path) -> PathBuf {
    let out = output_for(src, "-http-p3");
    build_c_http_p3(src, &out).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    out
}

/// Builds C against `world` of the WIT package in `wit` into the component `out`.
fn build_c_component_of(
    wit: &Path,
    src: &Path,
    world: &str,
    reactor: bool,
    out: &Path,
) -> Result<(), String> {
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let run = |cmd: &mut Command, what: &str| {
        let output = cmd
            .output()
            .map_err(|e| format!("{what}: {e} (scripts/test installs what is missing)"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    };
    run(
        Command::new(wit_bindgen())
            .arg("c")
            .arg(wit)
            .args(["--world", world, "--out-dir"])
            .arg(work.path()),
        "wit-bindgen",
    )?;
    let stem = world.replace('-', "_");
    let module = work.path().join("module.wasm");
    // Both are built as reactors: in the command model wasm-ld wraps every export in a
    // call of the C constructors, cabi_realloc included, and the host calls
    // cabi_realloc to return lists and strings, when the guest may not call imports
    // (which the constructors do: wasi-libc finds its preopens). A command gets its
    // `_start` from a shim instead, calling main as crt1 would.
    let shim = work.path().join("start.c");
    std::fs::write(
        &shim,
        "#include <stdlib.h>\nint __main_void(void);\n\
         __attribute__((export_name(\"_start\"))) void wasm9p_start(void) { exit(__main_void()); }\n",
    )
    .map_err(|e| e.to_string())?;
    let mut clang = Command::new("clang-14");
    if !reactor {
        clang.arg(&shim);
    }
    run(
        clang
            .args([
                "--target=wasm32-wasi",
                "--sysroot=/usr",
                "-mexec-model=reactor",
                "-O2",
                "-Wall",
                "-Werror",
                "-I",
            ])
            .arg(work.path())
            .arg("-o")
            .arg(&module)
            .arg(src)
            .arg(work.path().join(format!("{stem}.c")))
            .arg(work.path().join(format!("{stem}_component_type.o"))),
        "clang-14",
    )?;
    let adapter = if reactor {
        wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER
    } else {
        wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER
    };
    encode_component(&module, adapter, out);
    Ok(())
}

/// A C guest of the `sandbox` world (it may mount at run time) as a command component
/// in the tests' guest directory; each call gets its own file.
pub fn c_sandbox_guest(src: &Path) -> PathBuf {
    let out = output_for(src, "-sandbox");
    build_c_component(src, "sandbox", false, &out)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    out
}

/// [`build_c_plugin`] into the tests' guest directory; each call gets its own file.
pub fn c_plugin(src: &Path) -> PathBuf {
    let out = output_for(src, "-plugin");
    build_c_plugin(src, &out).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    out
}

/// A fresh file in `target/guests` for what is built from `src`: tests running in
/// parallel never race on one.
fn output_for(src: &Path, kind: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests");
    std::fs::create_dir_all(&dir).unwrap();
    let stem = src.file_stem().unwrap().to_string_lossy();
    dir.join(format!(
        "{stem}{kind}-{}-{}.wasm",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The text of a big preview1 module for the tier tests, without its `_start` (the
/// caller adds it and the closing parenthesis): an import of `fd_write`, a memory of
/// one page, and `functions` functions `$f0`.. of 40 steps of arithmetic each (i32 to
/// i32), enough that Cranelift takes a while on a few thousand of them.
pub fn arithmetic_module_wat(functions: u32) -> String {
    let mut wat = String::from(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
"#,
    );
    for f in 0..functions {
        wat.push_str(&format!(
            "  (func $f{f} (param i32) (result i32)\n    local.get 0\n"
        ));
        for step in 0..40u32 {
            let k = f.wrapping_mul(2_654_435_761).wrapping_add(step * 97) | 1;
            wat.push_str(&format!(
                "    i32.const {k} i32.mul i32.const {} i32.rotl i32.const {step} i32.xor\n",
                (step % 31) + 1
            ));
        }
        wat.push_str("  )\n");
    }
    wat
}
