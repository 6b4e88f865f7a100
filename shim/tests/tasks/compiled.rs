//! Compiled code kept across containers: the second container of an image does not
//! compile (nor does a non-root task's), a big program's optimized code is finished on
//! the node, and no task holds a descriptor it could write the module cache through.

use super::*;

#[test]
fn the_second_container_of_an_image_does_not_compile_nor_does_a_non_root_tasks() {
    for (user, name, first) in [
        ("", "docker.io/wasm9p/task:compiled", "image"),
        ("1000:1000", "docker.io/wasm9p/task:compiled-user", "user"),
    ] {
        second_container_does_not_compile(user, name, first);
    }
}

/// How a non-root task runs here: without the capabilities that would let it past
/// file permissions (a kubelet's runAsNonRoot pod has none of them either).
const UNPRIVILEGED: [&str; 4] = [
    "--cap-drop",
    "CAP_DAC_OVERRIDE",
    "--cap-drop",
    "CAP_DAC_READ_SEARCH",
];

fn second_container_does_not_compile(user: &str, name: &str, first: &str) {
    let options: &[&str] = if user.is_empty() { &[] } else { &UNPRIVILEGED };
    // A module of its own (a custom section makes its digest unique): no other test
    // has compiled it into the shared module cache.
    let module = with_custom_section(task_module(), name);
    containerd().import_as(
        "images",
        name,
        &["/task.wasm"],
        user,
        &[
            ("/task.wasm", &module),
            ("/etc/greeting", b"from the image\n"),
        ],
    );
    let mut compiles = Vec::new();
    for id in [format!("{first}-first"), format!("{first}-second")] {
        let id = id.as_str();
        let output = containerd().run(
            "images",
            options,
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
        "{user:?}: the first compiles, the second maps the code the node kept"
    );
    if !user.is_empty() {
        // It does run as that user, unprivileged (the image's root-owned /etc is not
        // its to write), and finds the code too.
        let output = containerd().run(
            "images",
            options,
            name,
            &format!("{first}-write"),
            &["/task.wasm", "write", "/etc/mine", "x"],
        );
        let (out, err) = text(&output);
        assert!(
            !output.status.success() && out.contains("Permission denied"),
            "{out}{err}"
        );
        let id = format!("{first}-running");
        let running = Running::spawn_image(
            "images",
            &id,
            name,
            options,
            &["/task.wasm", "sleep", "5"],
            0,
        );
        let status = std::fs::read_to_string(format!("/proc/{}/status", running.pid())).unwrap();
        let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert_eq!(uid.split_whitespace().nth(1), Some("1000"), "{uid}");
        assert!(!containerd()
            .log_of(&id)
            .iter()
            .any(|line| line.contains("wasm9p: compiling")));
    }
}

#[test]
fn no_task_holds_a_descriptor_into_the_module_cache_and_its_code_is_mapped_read_only() {
    let module = with_custom_section(limits_component(), "read-only-code");
    let root = rootfs(&[("/limits.wasm", &module)]);
    let cache = &containerd().module_cache;
    // The node compiles the program for the first container, which maps the code the
    // node kept, as a later one does. None holds a descriptor it could write through:
    // not the cache's directory, and an artifact only read-only (wasmtime keeps the
    // file it mapped open, for the memory images it makes from it).
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in 0.. {
        let id = format!("ro-code-{n}");
        let served = Running::start("ro-code", &id, root.path(), "/limits.wasm", &[]);
        assert_eq!(get(served.port, "/ok").unwrap(), (200, b"ok\n".to_vec()));
        let pid = served.pid();
        let mut writable = Vec::new();
        for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
        {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if !target.starts_with(cache) {
                continue;
            }
            let info = std::fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .unwrap();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
                .unwrap();
            let read_only = flags & 0o3 == 0; // O_ACCMODE == O_RDONLY
            let artifact = target.extension().is_some_and(|x| x == "cwasm") && target.is_file();
            if !(read_only && artifact) {
                writable.push((target, format!("{flags:o}")));
            }
        }
        assert!(writable.is_empty(), "{id} holds {writable:?}");
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let mapped: Vec<&str> = maps
            .lines()
            .filter(|line| line.contains(cache.to_str().unwrap()))
            .collect();
        // Private mappings only (a memory image's copy-on-write pages included): none
        // that writes through to the file.
        assert!(
            mapped
                .iter()
                .all(|line| line.split_whitespace().nth(1).unwrap().ends_with('p')),
            "{mapped:?}"
        );
        if !mapped.is_empty() && n > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no container mapped the code the node kept"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
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
    // Later containers start on the baseline code the node kept for the first, and run
    // on the optimized code once the node has kept it, compiling nothing.
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
