//! Compiled code kept across containers: the second container of an image does not
//! compile, and a big program's optimized code is finished on the node.

use super::*;

#[test]
fn the_second_container_of_an_image_does_not_compile() {
    let name = "docker.io/wasm9p/task:compiled";
    // A module of its own (a custom section makes its digest unique): no other test
    // has compiled it into the shared module cache.
    let module = with_custom_section(task_module(), "compiled-once");
    containerd().import(
        "images",
        name,
        &["/task.wasm"],
        &[
            ("/task.wasm", &module),
            ("/etc/greeting", b"from the image\n"),
        ],
    );
    let mut compiles = Vec::new();
    for id in ["image-first", "image-second"] {
        let output = containerd().run(
            "images",
            &[],
            name,
            id,
            &["/task.wasm", "cat", "/etc/greeting"],
        );
        let (out, err) = text(&output);
        assert!(output.status.success(), "{id}: {out}{err}");
        assert_eq!(out, "from the image\n");
        compiles.push(
            containerd()
                .log_of(id)
                .iter()
                .filter(|line| line.contains("wasm9p: compiling"))
                .count(),
        );
    }
    assert_eq!(
        compiles,
        [1, 0],
        "the first compiles, the second maps the cached code"
    );
}

/// A preview1 module past [`containerd::TIER_FROM`]: `functions` functions of
/// arithmetic, chained into one number `_start` prints.
fn big_module(functions: u32) -> Vec<u8> {
    let mut wat = wasm9p_tests::arithmetic_module_wat(functions);
    // _start: the chain's low byte as one letter and a newline.
    wat.push_str("  (func (export \"_start\") (local $v i32)\n    i32.const 7 local.set $v\n");
    for f in 0..functions {
        wat.push_str(&format!("    local.get $v call $f{f} local.set $v\n"));
    }
    wat.push_str(
        r#"    i32.const 16 local.get $v i32.const 25 i32.rem_u i32.const 97 i32.add i32.store8
    i32.const 17 i32.const 10 i32.store8
    i32.const 0 i32.const 16 i32.store
    i32.const 4 i32.const 2 i32.store
    i32.const 1 i32.const 0 i32.const 1 i32.const 8 call $fd_write drop)
)"#,
    );
    wat::parse_str(&wat).unwrap()
}

#[test]
fn a_big_programs_optimized_code_is_finished_on_the_node_for_the_next_container() {
    let module = big_module(2500);
    assert!(
        module.len() as u64 > containerd::TIER_FROM,
        "{} bytes",
        module.len()
    );
    let root = rootfs(&[("/big.wasm", &module)]);
    // The first container compiles the baseline code, starts the optimized compile,
    // and ends first: the node finishes it.
    let (code, first_out, err) = run("tiers", &[], root.path(), "tier-0", &["/big.wasm"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(first_out.len(), 2, "{first_out:?}");
    let ended = |id: &str| {
        containerd()
            .log_of(id)
            .iter()
            .find_map(|line| line.contains("ended with 0 on the").then(|| line.clone()))
            .unwrap_or_default()
    };
    let log = containerd().log_of("tier-0");
    assert!(ended("tier-0").contains("on the baseline tier"), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.contains("being compiled in the background for later runs")),
        "the unfinished compile was handed to the node: {log:?}"
    );
    // Later containers run on the optimized code once the node has kept it, and none
    // compiles anything (their first tier is cached, the optimized one is the node's).
    let deadline = Instant::now() + Duration::from_secs(120);
    for n in 1.. {
        let id = format!("tier-{n}");
        let (code, out, err) = run("tiers", &[], root.path(), &id, &["/big.wasm"]);
        assert_eq!((code, &out), (0, &first_out), "{id}: {err}");
        assert!(
            !containerd()
                .log_of(&id)
                .iter()
                .any(|l| l.contains("wasm9p: compiling")),
            "{id} compiled"
        );
        if ended(&id).contains("on the optimized tier") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no container ran on the optimized code"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `wasm` with a custom section named `name` appended: another module to the cache,
/// the same program.
fn with_custom_section(wasm: &[u8], name: &str) -> Vec<u8> {
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    out.push(section.len() as u8);
    out.extend_from_slice(&section);
    out
}
