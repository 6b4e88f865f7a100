//! A server killed and restarted in the middle of a build, with `reconnect=on`.

use super::*;

#[test]
fn a_server_killed_and_restarted_mid_build_loses_nothing_with_reconnect_on() {
    // `wasm9p serve` exports the sysroot and the project over a Unix socket; a batch of
    // 16 compiles runs on mounts of it with reconnect=on; once some objects are written
    // the server is killed (SIGKILL) and started again on the same socket. Every unit
    // that reports success must have an object identical to the one compiled on bind
    // mounts; a unit may fail only with an I/O error (a write in flight at the kill).
    warm_module_cache();
    let tmp = project();
    let units: Vec<(String, String)> = (0..16)
        .map(|i| (format!("/src/unit{i}.c"), format!("/out/unit{i}.o")))
        .collect();
    for (i, (source, _)) in units.iter().enumerate() {
        let text = format!(
            "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include \"project.h\"\n\
             int unit{i}(const char *s) {{ char *c = strdup(s); size_t n = strlen(c) * {i}; \
             printf(\"%s %zu\\n\", PROJECT_NAME, n); free(c); return (int)n; }}\n"
        );
        std::fs::write(tmp.path().join(&source[1..]), text).unwrap();
    }
    let commands = batch_file(tmp.path(), &units);
    let run_batch = |mount_args: Vec<String>, stats: &Path| {
        let mut args = vec!["batch".to_string(), "--jobs".into(), "2".into()];
        args.extend(mount_args);
        args.push(format!("--stats={}", stats.display()));
        args.extend(["--module".into(), clang_wasm().module.display().to_string()]);
        args.push(commands.display().to_string());
        wasm9p_tests::wasm9p_command(BIN, env!("CARGO_TARGET_TMPDIR"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };

    // The reference: bind mounts.
    let reference = tempfile::tempdir().unwrap();
    let out = run_batch(
        mount_args(Mounts::Bind, tmp.path(), reference.path()),
        &tmp.path().join("bind-stats.json"),
    )
    .wait_with_output()
    .unwrap();
    assert_ok("batch on bind", &out);

    // The server: the sysroot's usr and the project's src, proj and out by aname.
    let socket = tmp.path().join("9p.sock");
    let out_dir = tmp.path().join("out");
    let usr = clang_wasm().sysroot.join("usr");
    let serve_args: Vec<String> = vec![
        "--listen".into(),
        format!("unix:{}", socket.display()),
        "--export".into(),
        usr.display().to_string(),
        "--export".into(),
        tmp.path().join("src").display().to_string(),
        "--export".into(),
        tmp.path().join("proj").display().to_string(),
        "--export".into(),
        out_dir.display().to_string(),
    ];
    let (mut server, _) = wasm9p_tests::spawn_serve(BIN, &serve_args);
    let mut mounts = Vec::new();
    for (aname, target) in [
        ("usr", "/usr"),
        ("src", "/src"),
        ("proj", "/proj"),
        ("out", "/out"),
    ] {
        mounts.push("--mount".to_string());
        mounts.push(format!(
            "type=9p,source=unix:{},aname={aname},target={target},cache=loose,reconnect=on",
            socket.display()
        ));
    }
    let stats = tmp.path().join("stats.json");
    let batch = run_batch(mounts, &stats);

    // Kill the server once a few objects are on its disk, then start it again.
    let objects = || {
        std::fs::read_dir(&out_dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().extension() == Some("o".as_ref()))
            .count()
    };
    let start = std::time::Instant::now();
    while objects() < 3 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(300),
            "no objects appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let before = objects();
    server.kill().unwrap();
    server.wait().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (mut server, _) = wasm9p_tests::spawn_serve(BIN, &serve_args);
    let out = batch.wait_with_output().unwrap();
    server.kill().unwrap();
    let _ = server.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        before < units.len(),
        "the kill came mid-build: {before} objects"
    );

    let mut built = 0;
    for (i, (_, object)) in units.iter().enumerate() {
        let ours = std::fs::read(tmp.path().join(&object[1..]));
        let line_failed = !stderr.contains(&format!("line {}: exit 0 ", i + 1));
        if line_failed {
            assert!(
                stderr.contains("I/O error") || stderr.contains("Input/output error"),
                "unit {i} failed for another reason than the cut: {stderr}"
            );
            continue;
        }
        let reference = std::fs::read(reference.path().join(&object[5..])).unwrap();
        assert!(
            ours.as_ref().ok() == Some(&reference),
            "unit {i} reported success but its object differs from the bind build"
        );
        built += 1;
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let reconnects: Vec<u64> = json["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["reconnect"]["reconnects"].as_u64().unwrap())
        .collect();
    eprintln!(
        "killed after {before} objects; {built}/16 built identical; reconnects per mount \
         {reconnects:?}; exit {:?}",
        out.status.code()
    );
    assert!(
        built >= 14,
        "at most a unit or two may meet the cut: {stderr}"
    );
    assert!(
        reconnects.iter().all(|&n| n == 1),
        "every mount reconnected once: {reconnects:?}: {stderr}"
    );
}
