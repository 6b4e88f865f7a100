//! The engine's bounds on an action's guest: memory and output.

use super::*;

/// A worker of one slot whose guests get 64 MiB of memory and whose actions' outputs
/// 100,000 bytes.
fn limited_worker(farm: &Farm, pool: &str) -> Worker {
    Worker::start(
        farm,
        pool,
        &[
            "--jobs",
            "1",
            "--memory-limit",
            "64M",
            "--max-output",
            "100000",
        ],
    )
}

#[test]
fn the_memory_limit_is_known_by_the_engine_not_by_what_the_guest_prints() {
    const RESOURCE_EXHAUSTED: i32 = 8;
    let farm = Farm::get();
    let pool = "limits-typed";
    let _worker = limited_worker(farm, pool);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let run = |args: &[&str]| {
        let action = client.action(root.digest, args, &[], pool, None);
        client.execute(action, |_| {})
    };
    // wasmtime's own words for a memory grown past a limit, printed by a guest that
    // is nowhere near it: the action completes with the guest's exit code.
    let words = "forcing trap when growing memory to 1 bytes; \
                 forcing a memory growth failure to be a trap";
    let said = run(&["tool.wasm", "say", words, "3"]);
    assert_eq!(code(&said), 0, "{}", message(&said));
    let result = said.result.as_ref().unwrap();
    assert_eq!(result.exit_code, 3);
    let stderr = client.blob(result.stderr_digest.as_ref().unwrap());
    assert!(String::from_utf8_lossy(&stderr).contains(words));
    // A guest past the limit after filling its stderr past what the worker keeps
    // (nothing it or the worker writes after that is kept): still RESOURCE_EXHAUSTED.
    let flooded = run(&["tool.wasm", "flood", "200000", "128"]);
    assert_eq!(code(&flooded), RESOURCE_EXHAUSTED, "{}", message(&flooded));
    assert!(
        message(&flooded).contains("--memory-limit of 67108864 bytes"),
        "{}",
        message(&flooded)
    );
}

#[test]
fn a_guest_past_the_memory_limit_fails_resource_exhausted_and_writes_past_the_output_bound_fail() {
    const RESOURCE_EXHAUSTED: i32 = 8;
    let farm = Farm::get();
    let pool = "limits";
    let _worker = limited_worker(farm, pool);
    let client = Client::new(farm);
    let root = Root::default().file("tool.wasm", guest(), true).make();
    client.upload(root.blobs.clone());
    let run = |args: &[&str], outputs: &[&str]| {
        let action = client.action(root.digest, args, outputs, pool, None);
        client.execute(action, |_| {})
    };
    let over = run(&["tool.wasm", "alloc", "128"], &[]);
    assert_eq!(code(&over), RESOURCE_EXHAUSTED, "{}", message(&over));
    assert!(
        message(&over).contains("--memory-limit"),
        "{}",
        message(&over)
    );
    // Under it, the next guest runs.
    let under = run(&["tool.wasm", "alloc", "16"], &[]);
    assert_eq!(code(&under), 0, "{}", message(&under));
    assert_eq!(stdout_of(&client, &under), "allocated\n");
    // A write past the outputs' bound is the guest's ENOSPC: it fails as a program.
    let big = "x".repeat(150_000);
    let full = run(&["tool.wasm", "write", "out.txt", &big], &["out.txt"]);
    assert_eq!(code(&full), 0, "{}", message(&full));
    let result = full.result.as_ref().unwrap();
    assert_eq!(result.exit_code, 1);
    let stderr = client.blob(result.stderr_digest.as_ref().unwrap());
    assert!(
        String::from_utf8_lossy(&stderr).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&stderr)
    );
}
