//! Compiled code for images whose wasm comes as OCI wasm layers (media type
//! `application/wasm` or `application/vnd.bytecodealliance.wasm.component.layer.v0+wasm`,
//! the image's platform `wasm`): runwasi's `Compiler` hook.
//!
//! The first time containerd hands the shim an image's wasm layers, runwasi calls
//! [`Precompiler`]'s `compile` in the shim process and keeps what it returns in
//! containerd's content store, labelled with [`Precompiler`]'s cache key (the
//! compatibility hashes of the engines the code is for); later containers of the image
//! get the compiled code instead of the wasm, and start without compiling. Code is
//! compiled for the optimized tier of the engines the task will run on: the guest
//! engine's for a module or a `wasi:cli` component, the HTTP handler's for a
//! `wasi:http` component (a 0.2 proxy's or a 0.3 service's, see
//! [`wasm9p_host::http::HandlerKind`]). What the code is for is written before it
//! ([`TAG_CLI`], [`TAG_HTTP`], [`TAG_HTTP_SERVICE`]), so that the task knows without
//! the wasm's exports.
//!
//! The engines are made the first time they are needed, not when the shim starts: runwasi
//! asks for the hook as each shim process makes its first container (a pod's pause
//! container, for every pod), and most images have no wasm layers to compile.
//!
//! containerd hands over such layers from 1.6.25 and 1.7.7 on; Debian's 1.6.20
//! cannot unpack such an image at all. A wasm file in an ordinary rootfs layer, which
//! every containerd runs, is compiled through wasm9p's module cache instead (see
//! `crate::config`).

use std::hash::{Hash, Hasher};
use std::io::Cursor;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use containerd_shim_wasm::sandbox::context::WasmLayer;
use containerd_shim_wasm::shim::Compiler;
use wasm9p_host::engine::{guest_engines, ProgramSource, SetupError};
use wasm9p_host::http::{HandlerKind, HttpLimits};
use wasm9p_host::module_cache::{compile_ahead, Engines, Tier};

use crate::workload::{self, Workload};

/// Written before compiled code for a task that runs to its end.
pub const TAG_CLI: &[u8] = b"wasm9p-cli\n";

/// Written before compiled code for a task that serves HTTP as a 0.2 proxy.
pub const TAG_HTTP: &[u8] = b"wasm9p-http\n";

/// Written before compiled code for a task that serves HTTP as a 0.3 service.
pub const TAG_HTTP_SERVICE: &[u8] = b"wasm9p-http-service\n";

/// runwasi's precompile hook, on the engines tasks run on (made at first need).
#[derive(Default)]
pub struct Precompiler {
    targets: OnceLock<Option<Targets>>,
}

/// The engines code is compiled for, one set for each kind of task.
struct Targets {
    cli: Engines,
    proxy: Engines,
    service: Engines,
}

impl Targets {
    fn make() -> Result<Targets, SetupError> {
        let http = |kind| wasm9p_host::http::engines(&HttpLimits::default(), kind);
        Ok(Targets {
            cli: guest_engines(false)?,
            proxy: http(HandlerKind::Proxy)?,
            service: http(HandlerKind::Service)?,
        })
    }
}

impl Precompiler {
    /// The hook; its engines are made when it first compiles or is asked its key.
    pub fn new() -> Precompiler {
        Precompiler::default()
    }

    /// The engines, made now if they were not; none if they cannot be made (layers
    /// are then kept as they are, and tasks compile as they start).
    fn targets(&self) -> Option<&Targets> {
        self.targets
            .get_or_init(|| {
                Targets::make()
                    .inspect_err(|e| log::warn!("wasm9p: no precompiling: {e}"))
                    .ok()
            })
            .as_ref()
    }

    /// The compiled code of one wasm layer, tagged with what it is for; `None` for
    /// what is not a task's wasm, or when there are no engines to compile for
    /// (runwasi then keeps the layer as it is).
    pub fn compile_layer(&self, wasm: &[u8]) -> Option<Vec<u8>> {
        let targets = self.targets()?;
        let workload = workload::classify("the layer", Cursor::new(wasm))
            .inspect_err(|why| log::info!("wasm9p: not precompiled: {why}"))
            .ok()?;
        let (tag, engines) = match workload {
            Workload::HttpComponent(HandlerKind::Proxy) => (TAG_HTTP, &targets.proxy),
            Workload::HttpComponent(HandlerKind::Service) => (TAG_HTTP_SERVICE, &targets.service),
            Workload::Module | Workload::CliComponent => (TAG_CLI, &targets.cli),
        };
        let code = compile_ahead(engines.get(Tier::Optimized), wasm)
            .inspect_err(|why| log::warn!("wasm9p: cannot precompile a layer: {why}"))
            .ok()?;
        let mut tagged = Vec::with_capacity(tag.len() + code.len());
        tagged.extend_from_slice(tag);
        tagged.extend_from_slice(&code);
        Some(tagged)
    }

    /// A hash of the settings the code is compiled for (without engines, a key no
    /// compiled code has).
    fn key(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        crate::NAME.hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        match self.targets() {
            Some(targets) => {
                for engines in [&targets.cli, &targets.proxy, &targets.service] {
                    engines
                        .get(Tier::Optimized)
                        .precompile_compatibility_hash()
                        .hash(&mut hasher);
                }
            }
            None => "no engines".hash(&mut hasher),
        }
        hasher.finish()
    }
}

impl Compiler for Precompiler {
    fn cache_key(&self) -> impl Hash {
        self.key()
    }

    async fn compile(&self, layers: &[WasmLayer]) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
        Ok(layers
            .iter()
            .map(|layer| match layer.precompiled {
                true => None,
                false => self.compile_layer(&layer.layer),
            })
            .collect())
    }
}

/// The program an image's wasm layers give: compiled code as it is, or the wasm
/// itself (held in a memory file, named `/proc/self/fd/N`, which the descriptor
/// returned keeps open). The error is one line.
pub fn program_of_layers(
    layers: &[WasmLayer],
) -> Result<(ProgramSource, Workload, Option<OwnedFd>), String> {
    let [layer] = layers else {
        return Err(format!(
            "the image has {} wasm layers: wasm9p runs an image of one",
            layers.len()
        ));
    };
    let name = PathBuf::from(format!("layer {}", layer.config.digest()));
    if layer.precompiled {
        let (workload, code) = if let Some(code) = layer.layer.strip_prefix(TAG_HTTP) {
            (Workload::HttpComponent(HandlerKind::Proxy), code)
        } else if let Some(code) = layer.layer.strip_prefix(TAG_HTTP_SERVICE) {
            (Workload::HttpComponent(HandlerKind::Service), code)
        } else if let Some(code) = layer.layer.strip_prefix(TAG_CLI) {
            (Workload::Module, code)
        } else {
            return Err(format!(
                "{}: compiled code this shim did not make",
                name.display()
            ));
        };
        // A cli task's program is told module or component by the engine when it
        // loads; both run to their end.
        let source = ProgramSource::CompiledAhead {
            name,
            code: Arc::from(code),
        };
        return Ok((source, workload, None));
    }
    let workload = workload::classify(&name.display().to_string(), Cursor::new(&layer.layer))?;
    let file = rustix::fs::memfd_create("wasm9p-layer", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| format!("cannot hold the layer in memory: {e}"))?;
    rustix::io::write(&file, &layer.layer)
        .map_err(|e| format!("cannot hold the layer in memory: {e}"))
        .and_then(|n| match n == layer.layer.len() {
            true => Ok(()),
            false => Err("cannot hold the layer in memory: a short write".into()),
        })?;
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    Ok((ProgramSource::file(path), workload, Some(file)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_compile_for_the_engine_their_exports_call_for_and_load_as_tagged() {
        let compiler = Precompiler::new();
        assert!(
            compiler.targets.get().is_none(),
            "no engines before they are needed"
        );
        let module = wat::parse_str(r#"(module (func (export "_start")))"#).unwrap();
        let code = compiler.compile_layer(&module).unwrap();
        assert!(code.starts_with(TAG_CLI));
        // Not wasm: runwasi keeps the layer as it is.
        assert!(compiler.compile_layer(b"not wasm").is_none());

        let layer = |bytes: Vec<u8>, precompiled: bool| WasmLayer {
            config: oci_spec::image::DescriptorBuilder::default()
                .media_type("application/wasm")
                .digest(
                    "sha256:0123456789012345678901234567890123456789012345678901234567890123"
                        .parse::<oci_spec::image::Digest>()
                        .unwrap(),
                )
                .size(0u64)
                .build()
                .unwrap(),
            precompiled,
            layer: bytes,
        };
        let (source, workload, _) = program_of_layers(&[layer(code, true)]).unwrap();
        assert_eq!(workload, Workload::Module);
        assert!(matches!(source, ProgramSource::CompiledAhead { .. }));
        // The wasm itself is held in a memory file the engine reads.
        let (source, workload, held) = program_of_layers(&[layer(module.clone(), false)]).unwrap();
        assert_eq!(workload, Workload::Module);
        assert!(held.is_some());
        assert_eq!(std::fs::read(source.path()).unwrap(), module);

        let err = program_of_layers(&[layer(b"\0asm-nope".to_vec(), true)]).unwrap_err();
        assert!(
            err.contains("compiled code this shim did not make"),
            "{err}"
        );
        let err = program_of_layers(&[]).unwrap_err();
        assert!(err.contains("0 wasm layers"), "{err}");
    }
}
