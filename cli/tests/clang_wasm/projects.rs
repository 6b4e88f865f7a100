//! Whole projects: the demo compiled, linked and run through 9p, and a fresh process
//! on an fscache store building what bind builds.

use super::*;

/// The `-cc1` or `wasm-ld` line the driver prints for `args`, as batch words.
fn driver_line(mounts: &[String], args: &[&str], tool: &str) -> Vec<String> {
    let mut argv = vec!["run".to_string()];
    argv.extend(mounts.iter().cloned());
    argv.push(clang_wasm().module.display().to_string());
    argv.extend(["clang", "-###"].iter().chain(args).map(|a| a.to_string()));
    let out = wasm9p(&argv);
    assert_ok("clang -###", &out);
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = text
        .lines()
        .find(|l| l.contains(&format!("\"{tool}\"")))
        .unwrap_or_else(|| panic!("no {tool} line in {text}"));
    let mut words: Vec<String> = line
        .split("\" \"")
        .map(|w| w.trim().trim_matches('"').to_string())
        .collect();
    if words[0].is_empty() {
        words.remove(0); // the -cc1 line's empty argv[0]
    }
    words
}

#[test]
fn the_demo_project_compiles_links_and_runs_through_9p() {
    // What scripts/demo does: examples/project compiled unit by unit in one batch,
    // linked by clang.wasm's wasm-ld, and the program it made run.
    warm_module_cache();
    let work = tempfile::tempdir().unwrap();
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/project");
    for dir in ["src", "include"] {
        std::fs::create_dir_all(work.path().join(dir)).unwrap();
        for entry in std::fs::read_dir(project.join(dir)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), work.path().join(dir).join(entry.file_name())).unwrap();
        }
    }
    std::fs::create_dir(work.path().join("out")).unwrap();
    let mounts: Vec<String> = [
        format!(
            "type=9p,export={},target=/usr,cache=loose",
            clang_wasm().sysroot.join("usr").display()
        ),
        format!(
            "type=9p,export={},target=/p,cache=loose",
            work.path().display()
        ),
    ]
    .into_iter()
    .flat_map(|m| ["--mount".to_string(), m])
    .collect();
    let units = ["main", "parse", "shapes"];
    let lines: Vec<String> = units
        .iter()
        .map(|u| {
            let (src, obj) = (format!("/p/src/{u}.c"), format!("/p/out/{u}.o"));
            let words = driver_line(
                &mounts,
                &["-O2", "-I/p/include", "-c", &src, "-o", &obj],
                "-cc1",
            );
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            format!("llvm {}", quoted.join(" "))
        })
        .collect();
    let commands = work.path().join("compile");
    std::fs::write(&commands, lines.join("\n") + "\n").unwrap();
    let mut batch = vec!["batch".to_string()];
    batch.extend(mounts.iter().cloned());
    batch.extend(["--module".into(), clang_wasm().module.display().to_string()]);
    batch.push(commands.display().to_string());
    assert_ok("batch", &wasm9p(&batch));
    let objects: Vec<String> = units.iter().map(|u| format!("/p/out/{u}.o")).collect();
    let mut link_args: Vec<&str> = objects.iter().map(String::as_str).collect();
    link_args.extend(["-o", "/p/out/shapes.wasm"]);
    let link = driver_line(&mounts, &link_args, "wasm-ld");
    let mut run_link = vec!["run".to_string()];
    run_link.extend(mounts.iter().cloned());
    run_link.push(clang_wasm().module.display().to_string());
    run_link.extend(link);
    assert_ok("wasm-ld", &wasm9p(&run_link));
    let program = work.path().join("out/shapes.wasm");
    let out = wasm9p(&[
        "run".into(),
        "--no-mounts".into(),
        program.display().to_string(),
        "circle 2, square 3, triangle 4".into(),
    ]);
    assert_ok("the program", &out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "circle     2: 12.568\nsquare     3: 9.000\ntriangle   4: 8.000\ntotal 29.568\n"
    );
}

/// zstd's `lib/common` (the build workload's first directory), compiled by clang.wasm
/// through `cache=fscache` mounts of a `wasm9p serve` in two fresh `wasm9p batch`
/// processes sharing one store: the second starts warm (no failed walk, no page read
/// on the wire for the sysroot) and writes the same objects as bind mounts do.
#[test]
fn a_second_fresh_process_on_an_fscache_store_builds_what_bind_builds_without_reading_the_sysroot()
{
    warm_module_cache();
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let lib = wasm9p_tests::zstd_sources().join("lib");
    assert!(Command::new("cp")
        .args(["-r", lib.to_str().unwrap(), src.to_str().unwrap()])
        .status()
        .unwrap()
        .success());
    let mut units: Vec<String> = std::fs::read_dir(src.join("common"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".c"))
        .collect();
    units.sort();
    assert!(units.len() >= 6, "{units:?}");
    let usr = clang_wasm().sysroot.join("usr");
    let bind = |host: &Path, target: &str| {
        vec![
            "--mount".to_string(),
            format!("type=bind,source={},target={target}", host.display()),
        ]
    };
    // The driver's -cc1 line for the first unit, reused for each.
    let mut args = vec!["run".to_string()];
    args.extend(bind(&usr, "/usr"));
    args.extend(bind(&src, "/src"));
    args.push(clang_wasm().module.display().to_string());
    args.extend(
        [
            "clang",
            "-###",
            "-O1",
            "-c",
            "-DZSTD_DISABLE_ASM",
            "-I/src/common",
        ]
        .map(String::from),
    );
    args.push(format!("/src/common/{}", units[0]));
    args.extend(["-o".into(), "/out/first.o".into()]);
    let out = wasm9p(&args);
    assert_ok("clang -###", &out);
    let template = parse_cc1_line(&String::from_utf8_lossy(&out.stderr)).unwrap();
    let lines: Vec<String> = units
        .iter()
        .map(|unit| {
            let words: Vec<String> = template
                .iter()
                .map(|w| {
                    w.replace(&units[0], unit)
                        .replace("first.o", &format!("{unit}.o"))
                })
                .map(|w| format!("'{w}'"))
                .collect();
            format!("llvm {}", words.join(" "))
        })
        .collect();
    let commands = tmp.path().join("commands");
    std::fs::write(&commands, lines.join("\n") + "\n").unwrap();
    let batch = |mounts: Vec<String>, out_dir: &Path| {
        let stats = out_dir.with_extension("json");
        let mut args = vec!["batch".to_string(), "--jobs".into(), "2".into()];
        args.extend(mounts);
        args.extend(bind(out_dir, "/out"));
        args.push(format!("--stats={}", stats.display()));
        args.extend(["--module".into(), clang_wasm().module.display().to_string()]);
        args.push(commands.display().to_string());
        std::fs::create_dir(out_dir).unwrap();
        assert_ok(&format!("batch into {}", out_dir.display()), &wasm9p(&args));
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
        json
    };
    let mut on_bind = bind(&usr, "/usr");
    on_bind.extend(bind(&src, "/src"));
    batch(on_bind, &tmp.path().join("bind"));

    let socket = tmp.path().join("9p.sock");
    let listen = format!("unix:{}", socket.display());
    let (mut server, _) = wasm9p_tests::spawn_serve(
        BIN,
        [
            "--listen",
            &listen,
            "--export",
            usr.to_str().unwrap(),
            "--export",
            src.to_str().unwrap(),
        ],
    );
    let store = tmp.path().join("store");
    let ninep: Vec<String> = [("usr", "/usr"), ("src", "/src")]
        .iter()
        .flat_map(|(aname, target)| {
            [
                "--mount".to_string(),
                format!(
                    "type=9p,source={listen},aname={aname},target={target},cache=fscache,fscache_dir={}",
                    store.display(),
                ),
            ]
        })
        .collect();
    let first = batch(ninep.clone(), &tmp.path().join("first"));
    let second = batch(ninep, &tmp.path().join("second"));
    server.kill().unwrap();
    let _ = server.wait();

    for unit in &units {
        let object = format!("{unit}.o");
        let reference = std::fs::read(tmp.path().join("bind").join(&object)).unwrap();
        assert!(reference.starts_with(b"\0asm"), "{object}");
        for pass in ["first", "second"] {
            let ours = std::fs::read(tmp.path().join(pass).join(&object)).unwrap();
            assert!(ours == reference, "{pass}: {object} differs from bind's");
        }
    }
    let usr_mount = |json: &serde_json::Value| {
        json["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["target"] == "/usr")
            .unwrap()
            .clone()
    };
    let (cold, warm) = (usr_mount(&first), usr_mount(&second));
    eprintln!(
        "/usr RPCs: first process {}, second {}",
        cold["rpc"]["total"], warm["rpc"]["total"]
    );
    assert!(cold["failed_walks"].as_u64().unwrap() > 0, "{cold}");
    // The first process opened the headers cold, each in one flight (our server
    // promises order), and its objects are bind's.
    assert!(cold["flights"].as_u64().unwrap() > 0, "{cold}");
    assert_eq!(cold["flight_retries"], 0, "{cold}");
    assert_eq!(warm["failed_walks"], 0, "{warm}");
    assert_eq!(warm["rpc"]["read"].as_u64().unwrap_or(0), 0, "{warm}");
    assert!(warm["cache"]["persistent_hits"].as_u64().unwrap() > 0);
}
