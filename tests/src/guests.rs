//! C guests: compiled with Debian's clang for wasm32-wasi (clang-14, lld-14, wasi-libc,
//! libclang-rt-14-dev-wasm32, which `scripts/test` installs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Compiles one C file to a wasm32-wasi command module; each call gets its own output
/// file, so tests running in parallel never race on one.
pub fn compile_c_guest(src: &Path) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests");
    std::fs::create_dir_all(&dir).unwrap();
    let stem = src.file_stem().unwrap().to_string_lossy();
    let out = dir.join(format!(
        "{stem}-{}-{}.wasm",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
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
    let bytes = std::fs::read(module).unwrap();
    let component = wit_component::ComponentEncoder::default()
        .module(&bytes)
        .and_then(|e| {
            e.validate(true).adapter(
                "wasi_snapshot_preview1",
                wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_COMMAND_ADAPTER,
            )
        })
        .and_then(|e| e.encode())
        .unwrap_or_else(|e| panic!("componentizing {}: {e:#}", module.display()));
    let out = module.with_extension("component.wasm");
    std::fs::write(&out, component).unwrap();
    out
}
