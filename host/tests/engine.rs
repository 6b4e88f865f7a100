//! The guest engine as an embedder uses it (`wasm9p_host::engine`): a program from a
//! plain builder, guests run with their own argv, stdio and limits, and how each ended
//! as a type, never read off what it printed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use wasm9p_host::engine::{Guest, GuestEngine, Outcome, Stdio};
use wasm9p_host::module_cache::ModuleCache;

/// A preview1 module from `body` (the text of `_start`), with `proc_exit` imported
/// and `$hello`, which writes "hello\n" to the descriptor it is given.
fn module(dir: &tempfile::TempDir, name: &str, body: &str) -> PathBuf {
    let wat = format!(
        r#"(module
            (import "wasi_snapshot_preview1" "fd_write"
                (func $fd_write (param i32 i32 i32 i32) (result i32)))
            (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
            (memory (export "memory") 1)
            (data (i32.const 16) "hello\n")
            (func $hello (param $fd i32)
                ;; one iovec at 0: the 6 bytes at 16
                (i32.store (i32.const 0) (i32.const 16))
                (i32.store (i32.const 4) (i32.const 6))
                (drop (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8))))
            (func (export "_start") {body}))"#
    );
    let path = dir.path().join(format!("{name}.wasm"));
    std::fs::write(&path, wat::parse_str(&wat).unwrap()).unwrap();
    path
}

fn engine(program: &PathBuf, interruptible: bool) -> GuestEngine {
    GuestEngine::builder(program)
        .module_cache(ModuleCache::disabled())
        .interruptible(interruptible)
        .build()
        .unwrap()
}

#[test]
fn a_guest_s_exit_code_and_output_come_back_as_it_gave_them() {
    let dir = tempfile::tempdir().unwrap();
    let says_hello_and_exits_7 = module(
        &dir,
        "hello",
        "(call $hello (i32.const 1)) (call $proc_exit (i32.const 7))",
    );
    let engine = engine(&says_hello_and_exits_7, false);
    // One engine, many guests: each ends on its own.
    for _ in 0..2 {
        let finished = engine.run(Guest::new(vec!["hello".into()]).stdio(Stdio::Capture));
        assert!(
            matches!(finished.outcome, Outcome::Exited(7)),
            "{:?}",
            finished.outcome
        );
        assert_eq!(finished.outcome.exit_code(), 7);
        assert!(!finished.outcome.succeeded());
        assert_eq!(finished.outcome.reason(), None);
        assert_eq!(finished.stdout, b"hello\n");
        assert!(finished.stderr.is_empty());
    }
}

#[test]
fn a_trap_is_a_trap_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let traps = module(&dir, "trap", "unreachable");
    let finished = engine(&traps, false).run(Guest::new(vec!["trap".into()]).stdio(Stdio::Capture));
    assert!(
        matches!(finished.outcome, Outcome::Trapped(_)),
        "{:?}",
        finished.outcome
    );
    assert_eq!(finished.outcome.exit_code(), 1);
    let reason = finished.outcome.reason().unwrap();
    assert!(reason.contains("unreachable"), "{reason}");
}

#[test]
fn a_guest_over_its_memory_limit_is_known_by_type_with_the_limit_and_the_ask() {
    let dir = tempfile::tempdir().unwrap();
    // It writes to stderr, then grows by 64 MiB.
    let grows = module(
        &dir,
        "grow",
        "(call $hello (i32.const 2)) (drop (memory.grow (i32.const 1024)))",
    );
    let engine = engine(&grows, false);
    let limited = Guest::new(vec!["grow".into()])
        .stdio(Stdio::Capture)
        .memory_limit(Some(16 << 20));
    match engine.run(limited).outcome {
        Outcome::MemoryLimit(reached) => {
            assert_eq!(reached.limit, 16 << 20);
            assert_eq!(reached.asked, Some((1 + 1024) << 16));
        }
        other => panic!("{other:?}"),
    }
    // Without a limit the same guest grows and exits 0.
    let free = engine.run(Guest::new(vec!["grow".into()]).stdio(Stdio::Capture));
    assert!(free.outcome.succeeded(), "{:?}", free.outcome);
}

#[test]
fn a_cancelled_guest_is_interrupted_mid_computation() {
    let dir = tempfile::tempdir().unwrap();
    let spins = module(&dir, "spin", "(loop $forever (br $forever))");
    let engine = Arc::new(engine(&spins, true));
    let cancel = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (runs, flag) = (engine.clone(), cancel.clone());
    std::thread::spawn(move || {
        let guest = Guest::new(vec!["spin".into()])
            .stdio(Stdio::Capture)
            .cancel(flag);
        let _ = tx.send(runs.run(guest).outcome);
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "it spins until cancelled"
    );
    cancel.store(true, Ordering::Relaxed);
    let outcome = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a cancelled guest stops");
    assert!(matches!(outcome, Outcome::Interrupted), "{outcome:?}");
    assert_eq!(outcome.exit_code(), 1);
}

#[test]
fn a_program_that_does_not_load_is_a_one_line_setup_error() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.wasm");
    std::fs::write(&junk, b"\0asm not really").unwrap();
    let e = GuestEngine::builder(&junk)
        .module_cache(ModuleCache::disabled())
        .build()
        .err()
        .expect("junk does not load");
    assert!(
        matches!(e, wasm9p_host::engine::SetupError::Program(_)),
        "{e:?}"
    );
    assert_eq!(e.to_string().lines().count(), 1, "{e}");
}
