//! clang.wasm (npm `@yowasp/clang`, a WASI preview1 build of clang 22) compiling C and
//! C++ through our mounts with `wasm9p run` and `wasm9p batch`, as a user would: the
//! driver's `-###` gives the `-cc1` line, and the object files compiled through 9p must
//! be byte-identical to those compiled on a bind mount.
//!
//! The first run compiles the 75 MB module (a minute or more); the artifact is kept in
//! this crate's target tmpdir, so later runs start in well under a second.
//!
//! By scenario: here, single units and a batch on 9p and bind; `restarts`, `edits` and
//! `projects`.

use std::path::Path;
use std::process::{Command, Output};

use cc_support::assert_ok;
use wasm9p_tests::{clang_wasm, parse_cc1_line, Tree};

#[path = "../cc_support/mod.rs"]
mod cc_support;
mod edits;
mod projects;
mod restarts;

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
    wasm9p_tests::wasm9p_command(BIN, env!("CARGO_TARGET_TMPDIR"))
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
