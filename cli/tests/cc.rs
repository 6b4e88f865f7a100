//! `wasm9p cc` as a build system calls it: make on the example project, zstd's own
//! CMake build with our toolchain file, and the driver behaviours a build relies on
//! (response files, dependency files, stdin and stdout, errors and exit codes), with
//! clang.wasm from `@yowasp/clang`.

mod cc_support;

use std::path::Path;
use std::time::{Duration, SystemTime};

use cc_support::*;

fn files_in(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_in(&path, ext));
        } else if path.extension().is_some_and(|e| e == ext) {
            found.push(path);
        }
    }
    found.sort();
    found
}

#[test]
fn make_builds_the_example_project_and_rebuilds_only_what_a_header_edit_touches() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    example_project(dir);
    let out = make(dir, dir, &[], &[]);
    assert_ok("make", &out);
    let built = run_program(&dir.join("out/shapes.wasm"), dir, &[]);
    assert_ok("shapes.wasm", &built);
    assert_eq!(text(&built.stdout), shapes_natively());

    // The dependency files name headers make can find on the host (the toolchain's
    // under its sysroot), so the tree is up to date, not "No rule to make target".
    let deps = std::fs::read_to_string(dir.join("out/main.d")).unwrap();
    assert!(deps.contains("include/config.h"), "{deps}");
    assert!(!deps.contains(" /usr/"), "guest paths left in {deps}");
    assert!(
        deps.contains(
            &toolchain()
                .join("sysroot/usr/include")
                .display()
                .to_string()
        ),
        "{deps}"
    );
    let up_to_date = make(dir, dir, &[], &["-q"]);
    assert_eq!(
        up_to_date.status.code(),
        Some(0),
        "{}",
        text(&up_to_date.stderr)
    );

    // config.h is included by main.c and shapes.c only.
    let later = SystemTime::now() + Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(dir.join("include/config.h"))
        .unwrap()
        .set_modified(later)
        .unwrap();
    let again = make(dir, dir, &[], &[]);
    assert_ok("make after touching config.h", &again);
    let log = text(&again.stdout);
    assert!(
        log.contains("src/main.c") && log.contains("src/shapes.c"),
        "{log}"
    );
    assert!(
        !log.contains("src/parse.c"),
        "parse.c does not include config.h: {log}"
    );
}

/// How one of the zstd builds compiles.
#[derive(Clone, Copy)]
enum Build {
    /// Each compile in its own process, on the embedded 9p server.
    InProcess,
    /// The same on the plain host directory.
    OnBind,
    /// Through the daemon the first compile starts.
    AutoDaemon,
}

#[test]
fn zstd_builds_with_its_cmake_through_9p_identically_to_a_bind_mount_and_round_trips_a_file() {
    let zstd = wasm9p_tests::zstd_sources();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    copy_tree(&zstd, &dir.join("zstd"));
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/projects/zpipe"),
        &dir.join("zpipe"),
    );
    let toolchain_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cmake/wasm32-wasi-wasm9p.cmake");
    // A runtime directory of the test's own for the daemon the third build starts.
    let run_dir = tempfile::tempdir().unwrap();
    let build = |name: &str, how: Build| {
        let mut configure = command("cmake", dir, dir);
        configure
            .args(["-S", "zpipe", "-B", name, "-DCMAKE_BUILD_TYPE=Release"])
            .arg(format!("-DZSTD_DIR={}", dir.join("zstd").display()))
            .arg(format!(
                "-DCMAKE_TOOLCHAIN_FILE={}",
                toolchain_file.display()
            ))
            .arg(format!("-DWASM9P={BIN}"))
            .arg(format!("-DWASM9P_LINKS={}", dir.join("links").display()));
        let mut make = command("make", &dir.join(name), dir);
        make.arg("-j2");
        for cmd in [&mut configure, &mut make] {
            match how {
                Build::InProcess => {}
                Build::OnBind => {
                    cmd.env("WASM9P_ROOT_SOURCE", "bind");
                }
                // As a user runs it: the first compile starts the user's daemon.
                Build::AutoDaemon => {
                    cmd.env_remove("WASM9P_DAEMON")
                        .env("XDG_RUNTIME_DIR", run_dir.path());
                }
            }
        }
        assert_ok("cmake", &configure.output().unwrap());
        assert_ok("make", &make.output().unwrap());
        dir.join(name)
    };
    let ninep = build("build-9p", Build::InProcess);
    let bind = build("build-bind", Build::OnBind);
    let auto = build("build-auto", Build::AutoDaemon);
    assert_eq!(
        daemons_in(run_dir.path()).len(),
        1,
        "the build went through one daemon"
    );
    stop_daemons(run_dir.path());

    let objects = files_in(&ninep, "obj");
    assert!(
        objects.len() > 30,
        "zstd has more units than {}",
        objects.len()
    );
    for object in &objects {
        for (twin_build, how) in [(&bind, "bind-mount"), (&auto, "daemon-built")] {
            let twin = twin_build.join(object.strip_prefix(&ninep).unwrap());
            assert!(
                std::fs::read(object).unwrap() == std::fs::read(&twin).unwrap(),
                "{} differs from its {how} twin",
                object.display()
            );
        }
    }

    // The program does its job: a file compressed and decompressed byte for byte.
    let input: Vec<u8> = (0..400_000u32)
        .flat_map(|i| format!("line {} of {}\n", i % 977, i / 1000).into_bytes())
        .take(1 << 20)
        .collect();
    std::fs::write(dir.join("in.txt"), &input).unwrap();
    let arg = |name: &str| dir.join(name).display().to_string();
    let out = run_program(
        &ninep.join("zpipe.wasm"),
        dir,
        &[&arg("in.txt"), &arg("in.zst"), &arg("out.txt")],
    );
    assert_ok("zpipe", &out);
    assert!(std::fs::read(dir.join("out.txt")).unwrap() == input);
    let packed = std::fs::metadata(dir.join("in.zst")).unwrap().len();
    assert!(packed < input.len() as u64 / 4, "{packed} bytes compressed");
}

/// A project root with one C file and a header in a subdirectory.
fn small_project() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("src")).unwrap();
    std::fs::create_dir_all(root.path().join("inc")).unwrap();
    std::fs::write(root.path().join("inc/answer.h"), "#define ANSWER 42\n").unwrap();
    std::fs::write(
        root.path().join("src/a.c"),
        "#include <stdio.h>\n#include \"answer.h\"\nint main(void) { printf(\"%d\\n\", ANSWER); return 0; }\n",
    )
    .unwrap();
    root
}

fn cc(dir: &Path, root: &Path, args: &[&str]) -> std::process::Output {
    command(BIN, dir, root)
        .arg("cc")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn relative_paths_and_dotdot_mean_the_host_s_and_response_files_and_links_work() {
    let root = small_project();
    let src = root.path().join("src");
    std::fs::write(src.join("args"), "-I../inc -c a.c -o a.o\n").unwrap();
    assert_ok("cc @args", &cc(&src, root.path(), &["@args"]));
    assert!(src.join("a.o").is_file());
    assert_ok(
        "cc (link)",
        &cc(&src, root.path(), &["a.o", "-o", "a.wasm"]),
    );
    let out = run_program(&src.join("a.wasm"), root.path(), &[]);
    assert_eq!(text(&out.stdout), "42\n");

    // Called through a link named after the tool, every argument is the tool's.
    let link = root.path().join("wasm32-wasi-clang");
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    let out = command(&link, &src, root.path())
        .args(["-I../inc", "-c", "a.c", "-o", "b.o"])
        .output()
        .unwrap();
    assert_ok("wasm32-wasi-clang", &out);
    assert_eq!(
        std::fs::read(src.join("a.o")).unwrap(),
        std::fs::read(src.join("b.o")).unwrap()
    );
}

#[test]
fn the_root_can_come_from_a_wasm9p_serve_or_the_plain_directory_with_the_same_objects() {
    let root = small_project();
    let dir = root.path();
    let compile = |source: Option<&str>, object: &str| {
        let mut cmd = command(BIN, dir, dir);
        if let Some(source) = source {
            cmd.env("WASM9P_ROOT_SOURCE", source);
        }
        let out = cmd
            .args(["cc", "-O2", "-Iinc", "-c", "src/a.c", "-o", object])
            .output()
            .unwrap();
        assert_ok(&format!("cc with the root from {source:?}"), &out);
        std::fs::read(dir.join(object)).unwrap()
    };
    let embedded = compile(None, "embedded.o");
    let (mut server, line) = wasm9p_tests::spawn_serve(
        BIN,
        [
            "--export",
            dir.to_str().unwrap(),
            "--listen",
            "tcp:127.0.0.1:0",
        ],
    );
    let served = compile(Some(&wasm9p_tests::served_addr(&line)), "served.o");
    server.kill().unwrap();
    server.wait().unwrap();
    let bound = compile(Some("bind"), "bound.o");
    assert!(embedded == served && embedded == bound);
}

#[test]
fn dependency_files_stdin_stdout_and_verbose_behave_as_native_clang() {
    let root = small_project();
    let dir = root.path();
    let out = cc(
        dir,
        dir,
        &[
            "-Iinc", "-MD", "-MF", "deps/a.d", "-c", "src/a.c", "-o", "a.o",
        ],
    );
    // The dependency file's directory must exist, as with native clang.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    std::fs::create_dir(dir.join("deps")).unwrap();
    let out = cc(
        dir,
        dir,
        &[
            "-Iinc", "-MD", "-MF", "deps/a.d", "-MT", "obj/a.o", "-c", "src/a.c", "-o", "a.o",
        ],
    );
    assert_ok("cc -MD -MF", &out);
    let deps = std::fs::read_to_string(dir.join("deps/a.d")).unwrap();
    assert!(deps.starts_with("obj/a.o: src/a.c "), "{deps}");
    assert!(deps.contains(" inc/answer.h"), "{deps}");

    let out = cc(dir, dir, &["-Iinc", "-E", "-P", "src/a.c"]);
    assert_ok("cc -E", &out);
    assert!(
        text(&out.stdout).contains("printf(\"%d\\n\", 42)"),
        "{}",
        text(&out.stdout)
    );

    let out = with_stdin(
        command(BIN, dir, dir).args(["cc", "-x", "c", "-", "-o", "-", "-S"]),
        b"int twice(int x) { return 2 * x; }\n",
    );
    assert_ok("cc -x c - -S -o -", &out);
    assert!(
        text(&out.stdout).contains("twice:"),
        "{}",
        text(&out.stdout)
    );

    let out = cc(dir, dir, &["-v", "-Iinc", "-c", "src/a.c", "-o", "v.o"]);
    assert_ok("cc -v", &out);
    let said = text(&out.stderr);
    assert!(said.contains("clang version 22"), "{said}");
    assert!(
        said.contains("#include <...> search starts here:"),
        "{said}"
    );
    assert!(said.contains("\"-cc1\""), "{said}");

    let out = cc(dir, dir, &["--version"]);
    assert_ok("cc --version", &out);
    assert!(text(&out.stdout).starts_with("clang version 22"));
}

#[test]
fn errors_come_with_clang_s_message_and_exit_code_and_paths_outside_the_root_are_refused() {
    let root = small_project();
    let dir = root.path();
    std::fs::write(dir.join("bad.c"), "int f(void) { return undeclared; }\n").unwrap();
    let out = cc(dir, dir, &["-c", "bad.c", "-o", "bad.o"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("bad.c:1:22: error: use of undeclared identifier 'undeclared'"),
        "{}",
        text(&out.stderr)
    );
    assert!(!dir.join("bad.o").exists());

    let out = cc(dir, dir, &["-c", "missing.c"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no such file or directory: 'missing.c'"),
        "{}",
        text(&out.stderr)
    );

    let out = cc(dir, dir, &["-Iinc", "src/a.c", "-lnothere", "-o", "a.wasm"]);
    assert_eq!(out.status.code(), Some(1));
    let said = text(&out.stderr);
    assert!(said.contains("unable to find library -lnothere"), "{said}");
    assert!(
        said.contains("clang: error: linker command failed with exit code 1"),
        "{said}"
    );

    for outside in [
        &["-c", "/etc/hostname"][..],
        &["-I", "/usr/include", "-c", "src/a.c"],
        &["-c", "../x.c"],
    ] {
        let out = cc(dir, dir, outside);
        assert_eq!(out.status.code(), Some(2), "{outside:?}");
        assert!(
            text(&out.stderr).contains("is outside the project root"),
            "{}",
            text(&out.stderr)
        );
    }
    let elsewhere = tempfile::tempdir().unwrap();
    let out = cc(elsewhere.path(), dir, &["-c", "a.c"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is outside the project root"));
}

#[test]
fn setjmp_and_longjmp_programs_run_and_legacy_exception_code_is_explained() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    std::fs::write(
        dir.join("jump.c"),
        "#include <setjmp.h>\n#include <stdio.h>\nstatic jmp_buf env;\n\
         static void deep(int n) { if (n == 0) longjmp(env, 42); deep(n - 1); }\n\
         int main(void) { int got = setjmp(env); if (got == 0) { deep(5); return 1; }\n\
         printf(\"came back with %d\\n\", got); return got == 42 ? 0 : 1; }\n",
    )
    .unwrap();
    let sjlj = ["-O1", "-mllvm", "-wasm-enable-sjlj", "jump.c", "-lsetjmp"];
    let out = cc(
        dir,
        dir,
        &[
            &sjlj[..],
            &["-mllvm", "-wasm-use-legacy-eh=false", "-o", "jump.wasm"],
        ]
        .concat(),
    );
    assert_ok("cc (sjlj)", &out);
    let out = run_program(&dir.join("jump.wasm"), dir, &[]);
    assert_ok("jump.wasm", &out);
    assert_eq!(text(&out.stdout), "came back with 42\n");

    // LLVM's default is still the legacy instructions, which wasmtime does not run.
    let out = cc(dir, dir, &[&sjlj[..], &["-o", "legacy.wasm"]].concat());
    assert_ok("cc (legacy sjlj)", &out);
    let out = run_program(&dir.join("legacy.wasm"), dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("-wasm-use-legacy-eh=false"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn ctest_runs_each_wasm_test_through_the_toolchain_s_emulator_in_its_working_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/projects/ctests"),
        &dir.join("src"),
    );
    let toolchain_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cmake/wasm32-wasi-wasm9p.cmake");
    let mut configure = command("cmake", dir, dir);
    configure
        .args(["-S", "src", "-B", "build"])
        .arg(format!(
            "-DCMAKE_TOOLCHAIN_FILE={}",
            toolchain_file.display()
        ))
        .arg(format!("-DWASM9P={BIN}"))
        .arg(format!("-DWASM9P_LINKS={}", dir.join("links").display()));
    assert_ok("cmake", &configure.output().unwrap());
    let build = dir.join("build");
    assert_ok(
        "make",
        &command("make", &build, dir).arg("-j2").output().unwrap(),
    );
    // ctest with no option of ours: the emulator is the toolchain file's.
    let out = command("ctest", &build, dir)
        .arg("--output-on-failure")
        .output()
        .unwrap();
    let log = text(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "a test failed: {log}");
    for passed in ["writes_and_reads_back", "reads_source_data"] {
        assert!(
            log.lines()
                .any(|l| l.contains(passed) && l.contains("Passed")),
            "{passed}: {log}"
        );
    }
    assert!(
        log.lines()
            .any(|l| l.contains("fails_on_purpose") && l.contains("Failed")),
        "{log}"
    );
    assert!(log.contains("failing on purpose"), "its stderr: {log}");
    assert!(
        log.contains("67% tests passed, 1 tests failed out of 3"),
        "{log}"
    );
    // The test wrote its file where it ran: the build directory, on the host.
    assert_eq!(
        std::fs::read_to_string(build.join("roundtrip.out")).unwrap(),
        "written by a test\n"
    );
    // The runner's exit code is the guest's.
    let failing = command(BIN, &build, dir)
        .args(["run", "--root"])
        .arg(dir)
        .arg("fails.wasm")
        .output()
        .unwrap();
    assert_eq!(failing.status.code(), Some(3));
    // A working directory outside the root is refused, before anything runs.
    let outside = command(BIN, Path::new("/"), dir)
        .args(["run", "--root"])
        .arg(dir)
        .arg(build.join("fails.wasm"))
        .output()
        .unwrap();
    assert_eq!(outside.status.code(), Some(2));
    assert!(
        text(&outside.stderr).contains("outside the root"),
        "{}",
        text(&outside.stderr)
    );
}
