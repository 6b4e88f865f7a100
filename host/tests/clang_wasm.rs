//! clang.wasm (npm `@yowasp/clang`, a WASI preview1 build of clang 22) compiling C and
//! C++ through our mounts with `wasm9p run` and `wasm9p batch`, as a user would: the
//! driver's `-###` gives the `-cc1` line, and the object files compiled through 9p must
//! be byte-identical to those compiled on a bind mount.
//!
//! The first run compiles the 75 MB module (a minute or more); the artifact is kept in
//! this crate's target tmpdir, so later runs start in well under a second.

use std::path::Path;
use std::process::{Command, Output};

use cc_support::assert_ok;
use wasm9p_tests::{clang_wasm, parse_cc1_line, Tree};

mod cc_support;

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

const C_SOURCE: &str = r#"#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include "project.h"
int main(int argc, char **argv) {
    char *copy = strdup(argc > 1 ? argv[1] : PROJECT_NAME);
    printf("%s %zu\n", copy, strlen(copy));
    free(copy);
    return 0;
}
"#;

const CXX_SOURCE: &str = r#"#include <iostream>
#include <map>
#include <vector>
#include "project.h"
int main() {
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < 10; i++) m[i % 2 ? "odd" : "even"].push_back(i);
    for (auto &[k, v] : m) std::cout << PROJECT_NAME << ' ' << k << ' ' << v.size() << '\n';
}
"#;

/// The project: sources in /src, a header in /proj/include.
fn project() -> tempfile::TempDir {
    Tree::build(&[
        Tree::Dir(
            "src",
            vec![
                Tree::file("main.c", C_SOURCE),
                Tree::file("main.cc", CXX_SOURCE),
            ],
        ),
        Tree::Dir(
            "proj",
            vec![Tree::Dir(
                "include",
                vec![Tree::file("project.h", "#define PROJECT_NAME \"wasm9p\"\n")],
            )],
        ),
        Tree::Dir("out", vec![]),
    ])
}

/// How the guest sees the project and the sysroot.
#[derive(Clone, Copy, Debug)]
enum Mounts {
    Bind,
    Ninep,
}

fn mount_args(mounts: Mounts, project: &Path, out: &Path) -> Vec<String> {
    let usr = clang_wasm().sysroot.join("usr");
    let spec = |source: &Path, target: &str| match mounts {
        Mounts::Bind => format!("type=bind,source={},target={target}", source.display()),
        Mounts::Ninep => format!(
            "type=9p,export={},target={target},cache=loose",
            source.display()
        ),
    };
    vec![
        "--mount".into(),
        spec(&usr, "/usr"),
        "--mount".into(),
        spec(&project.join("src"), "/src"),
        "--mount".into(),
        spec(&project.join("proj"), "/proj"),
        "--mount".into(),
        spec(out, "/out"),
    ]
}

fn wasm9p(args: &[String]) -> Output {
    Command::new(BIN)
        .env(
            "WASM9P_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache"),
        )
        .args(args)
        .output()
        .unwrap()
}

/// Compiles clang.wasm into the module cache once, so that the tests (which run in
/// parallel) do not each compile it on a cold cache.
fn warm_module_cache() {
    static WARM: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    WARM.get_or_init(|| {
        // The optimized tier, as every later run will want it (a run on a cold cache
        // would start on the baseline tier and compile the optimized one meanwhile).
        let out = wasm9p(&[
            "compile".into(),
            "--tier".into(),
            "optimized".into(),
            clang_wasm().module.display().to_string(),
        ]);
        assert_ok("wasm9p compile", &out);
        let dir = tempfile::tempdir().unwrap();
        let out = wasm9p(&[
            "run".into(),
            "--dir".into(),
            format!("{}::/", dir.path().display()),
            clang_wasm().module.display().to_string(),
            "clang".into(),
            "--version".into(),
        ]);
        assert_ok("clang --version", &out);
        assert!(String::from_utf8_lossy(&out.stdout).contains("clang version 22"));
    });
}

/// The `-cc1` words the driver would run for `driver -c SOURCE -o OUTPUT FLAGS`.
fn cc1_words(driver: &str, source: &str, output: &str, flags: &[&str]) -> Vec<String> {
    let tmp = project();
    let mut args = vec!["run".to_string()];
    args.extend(mount_args(
        Mounts::Ninep,
        tmp.path(),
        &tmp.path().join("out"),
    ));
    args.push(clang_wasm().module.display().to_string());
    args.extend(
        [
            driver,
            "-###",
            "-c",
            source,
            "-o",
            output,
            "-I/proj/include",
        ]
        .map(String::from),
    );
    args.extend(flags.iter().map(|f| f.to_string()));
    let out = wasm9p(&args);
    assert_ok("clang -###", &out);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let words = parse_cc1_line(&text).unwrap_or_else(|| panic!("no -cc1 line in: {text}"));
    assert_eq!(&words[..2], [driver, "-cc1"], "{words:?}");
    assert!(
        words.iter().any(|w| w == "/usr/include/wasm32-wasip1"),
        "{words:?}"
    );
    words
}

/// Runs one cc1 command on the given mounts; returns the object written to /out.
fn compile(mounts: Mounts, cc1: &[String], object: &str) -> Vec<u8> {
    let tmp = project();
    let out_dir = tempfile::tempdir().unwrap();
    let mut args = vec!["run".to_string()];
    args.extend(mount_args(mounts, tmp.path(), out_dir.path()));
    args.push(clang_wasm().module.display().to_string());
    args.extend(cc1.iter().cloned());
    let out = wasm9p(&args);
    assert_ok(&format!("cc1 on {mounts:?}"), &out);
    std::fs::read(out_dir.path().join(object)).unwrap()
}

fn assert_same_object_on_bind_and_9p(driver: &str, source: &str, flags: &[&str]) {
    let object = format!(
        "{}.o",
        Path::new(source).file_name().unwrap().to_string_lossy()
    );
    let cc1 = cc1_words(driver, source, &format!("/out/{object}"), flags);
    let on_bind = compile(Mounts::Bind, &cc1, &object);
    let on_9p = compile(Mounts::Ninep, &cc1, &object);
    assert!(on_bind.starts_with(b"\0asm"), "a wasm object file");
    assert!(on_bind.len() > 200, "{} bytes", on_bind.len());
    assert!(
        on_bind == on_9p,
        "{source}: objects differ between bind and 9p"
    );
}

#[test]
fn a_c_file_compiles_to_the_same_object_on_9p_and_bind() {
    warm_module_cache();
    assert_same_object_on_bind_and_9p("clang", "/src/main.c", &["-O2"]);
}

#[test]
fn a_cxx_file_with_iostream_vector_map_compiles_to_the_same_object_on_9p_and_bind() {
    warm_module_cache();
    assert_same_object_on_bind_and_9p("clang++", "/src/main.cc", &["-std=c++17"]);
}

#[test]
fn batch_compiles_several_units_on_one_shared_9p_mount() {
    warm_module_cache();
    let tmp = project();
    let out_dir = tempfile::tempdir().unwrap();
    let c = cc1_words("clang", "/src/main.c", "/out/a.o", &[]);
    let cxx = cc1_words("clang++", "/src/main.cc", "/out/b.o", &[]);
    let mut failing = c.clone();
    let source = failing.len() - 1;
    failing[source] = "/src/missing.c".into();
    let commands = tmp.path().join("commands");
    let lines: Vec<String> = [c, cxx, failing]
        .iter()
        .map(|words| {
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            std::iter::once("llvm".to_string())
                .chain(quoted)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    std::fs::write(&commands, lines.join("\n") + "\n").unwrap();
    let stats = tmp.path().join("stats.json");
    let mut args = vec!["batch".to_string(), "--jobs".into(), "2".into()];
    args.extend(mount_args(Mounts::Ninep, tmp.path(), out_dir.path()));
    args.push(format!("--stats={}", stats.display()));
    args.extend(["--module".into(), clang_wasm().module.display().to_string()]);
    args.push(commands.display().to_string());
    let out = wasm9p(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "one guest fails: {stderr}");
    assert!(stderr.contains("line 3: exit 1"), "{stderr}");
    assert!(
        stderr.contains("3 guests, 2 exited 0, 1 did not"),
        "{stderr}"
    );
    assert!(
        stderr.contains("/src/missing.c': No such file or directory"),
        "clang's own error is shown: {stderr}"
    );
    for object in ["a.o", "b.o"] {
        let bytes = std::fs::read(out_dir.path().join(object)).unwrap();
        assert!(bytes.starts_with(b"\0asm"), "{object}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["guests"].as_u64(), Some(3));
    let usr = json["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["target"] == "/usr")
        .unwrap();
    assert!(
        usr["cache"]["dentry_hits"].as_u64().unwrap() > 100,
        "the guests share the /usr mount's cache: {usr}"
    );
}

/// Writes `commands` for `wasm9p batch`: one clang.wasm `-cc1` line per unit.
/// (The driver runs once, on main.c; its line is reused with each unit's names.)
fn batch_file(dir: &Path, units: &[(String, String)]) -> std::path::PathBuf {
    let template = cc1_words("clang", "/src/main.c", "/out/main.o", &["-O1"]);
    let lines: Vec<String> = units
        .iter()
        .map(|(source, object)| {
            let name = source.rsplit('/').next().unwrap();
            let words: Vec<&str> = template
                .iter()
                .map(|w| match w.as_str() {
                    "/src/main.c" => source.as_str(),
                    "main.c" => name,
                    "/out/main.o" => object.as_str(),
                    w => w,
                })
                .collect();
            assert!(words.contains(&object.as_str()), "{template:?}");
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            format!("llvm {}", quoted.join(" "))
        })
        .collect();
    let commands = dir.join("commands");
    std::fs::write(&commands, lines.join("\n") + "\n").unwrap();
    commands
}

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
        Command::new(BIN)
            .env(
                "WASM9P_CACHE_DIR",
                Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache"),
            )
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

/// Makes the next version of `config.h` from the current one (1 to 2, 2 to 3, then 4):
/// `clang -E -o` writes a temporary file and renames it over the header, as editors
/// and code generators do.
const NEXT_CONFIG: &str = "#include \"/edit/config.h\"
#define HASH #
#if VERSION == 1
#undef VERSION
HASH define VERSION 2
#elif VERSION == 2
#undef VERSION
HASH define VERSION 3
#else
#undef VERSION
HASH define VERSION 4
#endif
";

/// A unit whose code depends on `config.h` (given), under /src, /proj/include, /out.
fn versioned_project(config: &str) -> tempfile::TempDir {
    Tree::build(&[
        Tree::Dir(
            "src",
            vec![Tree::file(
                "main.c",
                "#include \"config.h\"\nint version(void) { return VERSION * 7; }\n",
            )],
        ),
        Tree::Dir(
            "proj",
            vec![Tree::Dir("include", vec![Tree::file("config.h", config)])],
        ),
        Tree::Dir("out", vec![]),
    ])
}

/// One `wasm9p batch --passes 3 --jobs 1` whose passes each first make a new version
/// of a header (through a bind mount of its directory: a change behind the 9p mount),
/// then compile a unit that includes it through 9p with `proj_options`; returns the
/// object the last pass wrote.
fn batch_with_a_header_edited_between_passes(proj_options: &str) -> Vec<u8> {
    let tmp = versioned_project("#define VERSION 1\n");
    std::fs::write(tmp.path().join("proj/include/next.c"), NEXT_CONFIG).unwrap();
    let cc1 = cc1_words("clang", "/src/main.c", "/out/main.o", &["-O1"]);
    let quoted = |words: &[String]| -> String {
        let words: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        format!("llvm {}", words.join(" "))
    };
    let edit: Vec<String> = ["clang", "-cc1", "-E", "-P", "-x", "c", "/edit/next.c"]
        .iter()
        .chain(&["-o", "/edit/config.h"])
        .map(|w| w.to_string())
        .collect();
    let commands = tmp.path().join("commands");
    std::fs::write(&commands, format!("{}\n{}\n", quoted(&edit), quoted(&cc1))).unwrap();
    let root = tmp.path();
    let ninep = |dir: &Path, target: &str, options: &str| {
        format!("type=9p,export={},target={target},{options}", dir.display())
    };
    let mut args: Vec<String> = ["batch", "--jobs", "1", "--passes", "3"]
        .map(String::from)
        .into();
    for mount in [
        ninep(&clang_wasm().sysroot.join("usr"), "/usr", "cache=loose"),
        ninep(&root.join("src"), "/src", proj_options),
        ninep(&root.join("proj"), "/proj", proj_options),
        format!(
            "type=bind,source={},target=/out",
            root.join("out").display()
        ),
        format!(
            "type=bind,source={},target=/edit",
            root.join("proj/include").display()
        ),
    ] {
        args.extend(["--mount".to_string(), mount]);
    }
    args.extend(["--module".into(), clang_wasm().module.display().to_string()]);
    args.push(commands.display().to_string());
    let out = wasm9p(&args);
    assert_ok(&format!("batch with {proj_options}"), &out);
    let header = std::fs::read_to_string(root.join("proj/include/config.h")).unwrap();
    assert_eq!(header.trim(), "# define VERSION 4", "three edits were made");
    std::fs::read(root.join("out/main.o")).unwrap()
}

/// The object a fresh `wasm9p run` on bind mounts makes of the same unit with the
/// header at version 4.
fn fresh_object_with_version_4() -> Vec<u8> {
    let tmp = versioned_project("# define VERSION 4\n");
    let out_dir = tempfile::tempdir().unwrap();
    let cc1 = cc1_words("clang", "/src/main.c", "/out/main.o", &["-O1"]);
    let mut args = vec!["run".to_string()];
    args.extend(mount_args(Mounts::Bind, tmp.path(), out_dir.path()));
    args.push(clang_wasm().module.display().to_string());
    args.extend(cc1);
    assert_ok("fresh compile", &wasm9p(&args));
    std::fs::read(out_dir.path().join("main.o")).unwrap()
}

#[test]
fn a_long_lived_batch_compiles_a_header_edited_behind_its_mount_between_passes() {
    warm_module_cache();
    let fresh = fresh_object_with_version_4();
    assert!(fresh.starts_with(b"\0asm"));
    // revalidate: the last pass compiles the header as it is now.
    for options in ["cache=loose,revalidate=1000", "cache=0x3"] {
        let last = batch_with_a_header_edited_between_passes(options);
        assert!(
            last == fresh,
            "{options}: the last pass's object is a fresh build's"
        );
    }
    // Loose without revalidate= trusts what it cached in the first pass, as documented:
    // its last object is not the fresh one (which shows the edits matter).
    let loose = batch_with_a_header_edited_between_passes("cache=loose");
    assert!(loose != fresh, "loose keeps the header it read in pass 1");
}

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
