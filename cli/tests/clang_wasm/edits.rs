//! A long-lived batch whose header is edited behind its mount between passes.

use super::*;

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
