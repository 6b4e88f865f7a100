//! Which host paths a tool's arguments name, and whether the guest can see them.
//!
//! The guest sees the project root at its own absolute path, the toolchain at `/usr`
//! and a private `/tmp`; nothing else of the host. A path outside the root would open
//! something else in the guest (or nothing), so it is refused before any guest runs,
//! naming the path. Which arguments are paths: the operands (words that are not
//! options, and not the value of an option that takes a non-path value, such as
//! `-MT` or `-D`), the values of the options that take a path, joined (`-Iinc`,
//! `--sysroot=/s`) or separate (`-I inc`), and response files (`@file`). Relative paths
//! are taken from the working directory, which is inside the root; only a `..` can
//! lead them out.

use std::path::{Component, Path, PathBuf};

/// Options whose value is a path, given joined (`-Idir`, `-I=dir` for the `--` ones)
/// or as the next word.
const PATH_OPTIONS: &[&str] = &[
    "-I",
    "-L",
    "-o",
    "-MF",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-include",
    "-imacros",
    "-iprefix",
    "-iwithprefix",
    "-isysroot",
    "-B",
    "-F",
    "-T",
    "--sysroot",
    "--include-directory",
    "--library-directory",
    "--output",
];

/// Options whose next word is a value that is not a path.
const VALUE_OPTIONS: &[&str] = &[
    "-MT",
    "-MQ",
    "-D",
    "-U",
    "-x",
    "-target",
    "--target",
    "-arch",
    "-mllvm",
    "-Xclang",
    "-Xlinker",
    "-Xassembler",
    "-Xpreprocessor",
    "-e",
    "--entry",
    "-u",
    "--undefined",
    "-z",
    "-m",
    "--export",
    "-l",
];

/// The first argument naming a path outside `root`, as written (or `None`).
pub(super) fn outside_root(args: &[String], cwd: &Path, root: &Path) -> Option<String> {
    let outside = |path: &str| -> bool {
        if path.is_empty() || path == "-" {
            return false;
        }
        let full = normalize(&cwd.join(path));
        !full.starts_with(root)
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let candidate = if let Some(file) = arg.strip_prefix('@') {
            Some(file)
        } else if !arg.starts_with('-') {
            Some(arg.as_str())
        } else if PATH_OPTIONS.contains(&arg.as_str()) {
            args.next().map(String::as_str)
        } else if VALUE_OPTIONS.contains(&arg.as_str()) {
            args.next();
            None
        } else {
            joined_path(arg)
        };
        if let Some(path) = candidate.filter(|p| outside(p)) {
            return Some(path.to_owned());
        }
    }
    None
}

/// The path in `-Idir`, `--sysroot=dir` or `-I=dir`, for the options that take one.
fn joined_path(arg: &str) -> Option<&str> {
    PATH_OPTIONS.iter().find_map(|opt| {
        let value = arg.strip_prefix(opt)?;
        if opt.starts_with("--") {
            value.strip_prefix('=')
        } else if opt.len() == 2 {
            // `-I` and the other one-letter options glue their value on.
            Some(value.strip_prefix('=').unwrap_or(value)).filter(|v| !v.is_empty())
        } else {
            // `-isystemdir`: rare but valid. An option that merely starts like one of
            // these (`-include-pch`) gives a relative "path", which never leaves the
            // root.
            Some(value).filter(|v| !v.is_empty())
        }
    })
}

/// `path` with `.` and `..` taken lexically (as the guest namespace takes them).
pub(super) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str]) -> Option<String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        outside_root(&args, Path::new("/p/build"), Path::new("/p"))
    }

    #[test]
    fn paths_inside_the_root_pass() {
        assert_eq!(
            check(&[
                "-c",
                "../src/a.c",
                "-I../include",
                "-I",
                "/p/inc",
                "-o",
                "a.o",
                "-MD",
                "-MF",
                "a.d",
                "-MT",
                "/elsewhere/a.o",
                "-DPREFIX=/usr/local",
                "--sysroot=/p/s",
                "@/p/build/args",
                "-",
            ]),
            None
        );
    }

    #[test]
    fn each_way_of_naming_a_path_outside_is_caught() {
        assert_eq!(check(&["-c", "/etc/a.c"]).as_deref(), Some("/etc/a.c"));
        assert_eq!(check(&["-c", "../../a.c"]).as_deref(), Some("../../a.c"));
        assert_eq!(
            check(&["-I/usr/include", "a.c"]).as_deref(),
            Some("/usr/include")
        );
        assert_eq!(check(&["-I", "/opt/inc"]).as_deref(), Some("/opt/inc"));
        assert_eq!(check(&["-o", "/tmp/a.o"]).as_deref(), Some("/tmp/a.o"));
        assert_eq!(check(&["-MF", "/tmp/a.d"]).as_deref(), Some("/tmp/a.d"));
        assert_eq!(check(&["--sysroot=/s"]).as_deref(), Some("/s"));
        assert_eq!(check(&["-isystem/x"]).as_deref(), Some("/x"));
        assert_eq!(check(&["@/etc/args"]).as_deref(), Some("/etc/args"));
        assert_eq!(
            check(&["rcs", "/x/lib.a", "a.o"]).as_deref(),
            Some("/x/lib.a")
        );
    }

    #[test]
    fn a_root_that_is_a_prefix_of_a_name_is_not_its_directory() {
        assert_eq!(check(&["/pq/a.c"]).as_deref(), Some("/pq/a.c"));
    }
}
