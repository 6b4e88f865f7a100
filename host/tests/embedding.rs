//! The embedding API as a runtime uses it (the same steps as `examples/embed.rs`): a
//! mount table from SPECs, the embedder's own store data behind [`WasiP1View`],
//! `add_to_linker`, a context per guest with captured output, `close_all` and
//! `exit_status`; two guests on one table share its caches.

use std::path::Path;
use std::sync::{Arc, Mutex};

use wasm9p_host::mounts::MountTable;
use wasm9p_host::p1::{self, Output, WasiP1Ctx, WasiP1View};
use wasm9p_tests::{compile_c_guest, Tree};
use wasmtime::{Engine, Linker, Module, Store};

struct Embedder {
    wasi: WasiP1Ctx,
    calls: u64,
}

impl WasiP1View for Embedder {
    fn wasi_p1(&mut self) -> &mut WasiP1Ctx {
        self.calls += 1;
        &mut self.wasi
    }
}

#[test]
fn an_embedder_runs_guests_with_its_own_store_data_on_a_shared_mount_table() {
    let wasm = compile_c_guest(&wasm9p_tests::guest_source("fileops.c"));
    let dir = Tree::build(&[Tree::Dir("a", vec![Tree::file("hello.txt", "hello\n")])]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mounts = runtime
        .block_on(
            MountTable::builder()
                .mount(&format!(
                    "type=9p,export={},target=/data,cache=loose",
                    dir.path().display()
                ))
                .unwrap()
                .build(),
        )
        .unwrap();
    let engine = Engine::default();
    let module = Module::from_file(&engine, &wasm).unwrap();
    let mut linker = Linker::new(&engine);
    p1::add_to_linker(&mut linker).unwrap();

    let mut walks = Vec::new();
    for (round, exit) in [(0, "0"), (1, "4")] {
        let out = Arc::new(Mutex::new(Vec::new()));
        let wasi = WasiP1Ctx::builder(mounts.namespace().clone(), runtime.handle().clone())
            .args(["guest", "/data/a", exit])
            .env("WASM9P_TEST", format!("round {round}"))
            .stdout(Output::Capture(out.clone()))
            .build();
        let mut store = Store::new(&engine, Embedder { wasi, calls: 0 });
        let instance = linker.instantiate(&mut store, &module).unwrap();
        let start = instance
            .get_typed_func::<(), ()>(&mut store, "_start")
            .unwrap();
        let result = start.call(&mut store, ());
        store.data_mut().wasi.close_all();
        assert_eq!(
            p1::exit_status(result).unwrap(),
            exit.parse::<i32>().unwrap()
        );
        assert!(
            store.data().calls > 1000,
            "the view is how every call reaches WASI"
        );
        let text = String::from_utf8(out.lock().unwrap().clone()).unwrap();
        assert!(
            text.starts_with(&format!("args 3 guest env round {round}\n")),
            "{text}"
        );
        assert!(text.contains("read 6 bytes: hello"), "{text}");
        let stats = mounts.stats_json(1, 0);
        walks.push(stats["mounts"][0]["rpc"]["walk"].as_u64().unwrap());
    }
    // The second guest's lookups of names the first one found cost fewer walks.
    assert!(
        walks[1] - walks[0] < walks[0],
        "walks after each guest: {walks:?}"
    );
}

/// The preview2 side: the embedder's store data implements wasmtime-wasi's `WasiView`
/// and our `WasiP2View`; `wasm9p_host::p2::add_to_linker` links every interface with
/// our filesystem; the component runs as a future on the mounts' runtime.
struct ComponentEmbedder {
    wasi: wasmtime_wasi::WasiCtx,
    table: wasmtime::component::ResourceTable,
    fs: wasm9p_host::p2::WasiP2Fs,
}

impl wasmtime_wasi::WasiView for ComponentEmbedder {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasm9p_host::p2::WasiP2View for ComponentEmbedder {
    fn filesystem(&mut self) -> wasm9p_host::p2::FsView<'_> {
        wasm9p_host::p2::FsView {
            fs: &mut self.fs,
            table: &mut self.table,
        }
    }
}

#[test]
fn an_embedder_runs_a_component_on_the_same_mount_table() {
    let module = compile_c_guest(&wasm9p_tests::guest_source("fileops.c"));
    let component = wasm9p_tests::componentize(&module);
    let dir = Tree::build(&[Tree::file("hello.txt", "hello\n")]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let spec = format!("type=9p,export={},target=/data", dir.path().display());
    let mounts = runtime
        .block_on(MountTable::builder().mount(&spec).unwrap().build())
        .unwrap();
    let engine = Engine::default();
    let component = wasmtime::component::Component::from_file(&engine, &component).unwrap();
    let mut linker = wasmtime::component::Linker::new(&engine);
    wasm9p_host::p2::add_to_linker(&mut linker).unwrap();
    let out = wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(1 << 20);
    let status = runtime.block_on(async {
        let mut wasi = wasmtime_wasi::WasiCtx::builder();
        wasi.args(&["guest", "/data"]).stdout(out.clone());
        let data = ComponentEmbedder {
            wasi: wasi.build(),
            table: Default::default(),
            fs: wasm9p_host::p2::WasiP2Fs::new(mounts.namespace().clone()).await,
        };
        let mut store = Store::new(&engine, data);
        let command = wasmtime_wasi::p2::bindings::Command::instantiate_async(
            &mut store, &component, &linker,
        )
        .await
        .unwrap();
        let result = command.wasi_cli_run().call_run(&mut store).await.unwrap();
        store.data().fs.close_all().await;
        result
    });
    let text = String::from_utf8(out.contents().to_vec()).unwrap();
    assert_eq!(status, Ok(()), "{text}");
    assert!(text.contains("read 6 bytes: hello"), "{text}");
    assert!(text.contains("rmdir: 0"), "{text}");
    let walks = mounts.stats_json(1, 0)["mounts"][0]["rpc"]["walk"].as_u64();
    assert!(walks.unwrap() > 0, "the component's files came over 9p");
}

/// A WASI 0.3 component of the community's suite (`filesystem-io`: reads and writes
/// through streams), and a copy of the root its spec runs it in.
fn p3_suite_component() -> (std::path::PathBuf, tempfile::TempDir) {
    let suite = std::env::var_os("WASI_TESTSUITE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/wasi-testsuite")
        })
        .join("tests/rust/testsuite/wasm32-wasip3");
    let root = tempfile::tempdir().unwrap();
    for name in ["a.txt", "b.txt"] {
        std::fs::copy(
            suite.join("fs-tests.dir").join(name),
            root.path().join(name),
        )
        .unwrap();
    }
    (suite.join("filesystem-io.wasm"), root)
}

#[test]
fn an_embedder_runs_a_wasi_0_3_component_on_the_same_mount_table() {
    let (component, root) = p3_suite_component();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let spec = format!(
        "type=9p,export={},target=/,cache=loose",
        root.path().display()
    );
    let mounts = runtime
        .block_on(MountTable::builder().mount(&spec).unwrap().build())
        .unwrap();
    // wasmtime's default config has the component model's async support.
    let engine = Engine::default();
    let component = wasmtime::component::Component::from_file(&engine, &component).unwrap();
    assert!(wasm9p_host::p3::exports_p3_run(&engine, &component));
    let mut linker = wasmtime::component::Linker::new(&engine);
    wasm9p_host::p3::add_to_linker(&mut linker).unwrap();
    let run = || {
        runtime.block_on(async {
            let data = ComponentEmbedder {
                wasi: wasmtime_wasi::WasiCtx::builder().build(),
                table: Default::default(),
                fs: wasm9p_host::p2::WasiP2Fs::new(mounts.namespace().clone()).await,
            };
            let mut store = Store::new(&engine, data);
            let command = wasmtime_wasi::p3::bindings::Command::instantiate_async(
                &mut store, &component, &linker,
            )
            .await
            .unwrap();
            let result = store
                .run_concurrent(async move |store| command.wasi_cli_run().call_run(store).await)
                .await
                .unwrap()
                .unwrap();
            store.data().fs.close_all().await;
            result
        })
    };
    assert_eq!(run(), Ok(()), "the component's own checks passed");
    let stats = mounts.stats_json(1, 0);
    let rpc = &stats["mounts"][0]["rpc"];
    assert!(
        rpc["walk"].as_u64().unwrap() > 0,
        "its files came over 9p: {rpc}"
    );
    // It reads what it wrote, then cleans up: the host directory is as it was.
    let mut names: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "b.txt"]);
    // A second guest on the same table passes too, on what the first left cached.
    assert_eq!(run(), Ok(()));
}
