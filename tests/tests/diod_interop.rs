//! Debian's diod tools (real 9P2000.L clients) list and read through our server
//! exactly as through `diod` itself serving the same tree.

use std::process::Command;

use wasm9p_tests::{Diod, TestServer, Tree};

fn tree() -> tempfile::TempDir {
    Tree::build(&[
        Tree::file("empty", ""),
        Tree::file("small.txt", "small file\n"),
        Tree::File(
            "big.bin",
            (0..1_300_000u32).map(|i| (i * 7 % 251) as u8).collect(),
        ),
        Tree::Dir(
            "sub",
            vec![
                Tree::file("a", "A"),
                Tree::file("b", "B"),
                Tree::Dir("nested", vec![]),
            ],
        ),
        Tree::Symlink("link-to-small", "small.txt"),
        Tree::Symlink("outside", "/etc/hostname"),
    ])
}

fn run(tool: &str, server: &str, aname: &str, args: &[&str]) -> (bool, Vec<u8>) {
    let out = Command::new(tool)
        .args(["-s", server, "-a", aname, "-t", "10"])
        .args(args)
        .output()
        .unwrap();
    (out.status.success(), out.stdout)
}

/// `diodls -l` output lines, sorted, without `..` (diod shows the export's host parent
/// there; we show the export root itself, since nothing above it is visible).
fn listing(server: &str, aname: &str, dir: &str) -> Vec<String> {
    let (ok, out) = run("/usr/sbin/diodls", server, aname, &["-l", dir]);
    assert!(ok, "diodls {dir} via {server} failed");
    let mut lines: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .filter(|l| !l.ends_with(" .."))
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

#[test]
fn diodls_lists_the_same_through_our_server_and_diod() {
    let dir = tree();
    let diod = Diod::start(dir.path());
    let ours = TestServer::tcp(dir.path());
    let aname = dir.path().to_str().unwrap();
    for sub in ["/", "/sub", "/sub/nested"] {
        let theirs = listing(&diod.host_port(), aname, sub);
        let mine = listing(&ours.host_port(), aname, sub);
        assert!(!theirs.is_empty(), "{sub}: {theirs:?}");
        assert_eq!(mine, theirs, "listing of {sub}");
    }
    // Our server also takes the export's name as aname.
    let name = dir.path().file_name().unwrap().to_str().unwrap();
    assert_eq!(
        listing(&ours.host_port(), name, "/sub"),
        listing(&diod.host_port(), aname, "/sub")
    );
}

#[test]
fn diodcat_reads_the_same_bytes_through_our_server_and_diod() {
    let dir = tree();
    let diod = Diod::start(dir.path());
    let ours = TestServer::tcp(dir.path());
    let aname = dir.path().to_str().unwrap();
    for file in ["empty", "small.txt", "big.bin", "sub/a"] {
        let expected = std::fs::read(dir.path().join(file)).unwrap();
        for msize in ["8192", "65536"] {
            let (ok, theirs) = run(
                "/usr/sbin/diodcat",
                &diod.host_port(),
                aname,
                &["-m", msize, file],
            );
            assert!(ok, "diod {file}");
            let (ok, mine) = run(
                "/usr/sbin/diodcat",
                &ours.host_port(),
                aname,
                &["-m", msize, file],
            );
            assert!(ok, "ours {file}");
            assert_eq!(mine.len(), expected.len(), "{file} at msize {msize}");
            assert!(
                mine == expected && theirs == expected,
                "{file} at msize {msize}"
            );
        }
    }
}

#[test]
fn diodcat_cannot_open_through_a_symlink_on_our_server() {
    // diod opens a symlink's target (even outside its export); we never do: Tlopen of a
    // symlink is ELOOP, so a client must readlink and resolve in its own namespace.
    let dir = tree();
    let ours = TestServer::tcp(dir.path());
    let aname = dir.path().to_str().unwrap();
    for link in ["outside", "link-to-small"] {
        let (ok, out) = run("/usr/sbin/diodcat", &ours.host_port(), aname, &[link]);
        assert!(
            !ok && out.is_empty(),
            "{link} must not be readable through the link"
        );
    }
}

#[test]
fn unknown_aname_fails_cleanly() {
    let dir = tree();
    let ours = TestServer::tcp(dir.path());
    let (ok, _) = run(
        "/usr/sbin/diodls",
        &ours.host_port(),
        "/not/exported",
        &["/"],
    );
    assert!(!ok);
    // The server is still fine afterwards.
    assert_eq!(
        listing(&ours.host_port(), dir.path().to_str().unwrap(), "/sub").len(),
        4
    );
}
