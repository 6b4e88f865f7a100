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
    let wasm =
        compile_c_guest(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guests/fileops.c"));
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
