//! The real Linux kernel 9p client (Debian's 6.1, in QEMU) against our server over TCP:
//! one export mounted with `cache=none` and one with `cache=loose`, the same file
//! operations run on both, and the results checked inside the guest and on the host;
//! and a third export in the mapped-xattr security model, where the guest (root)
//! makes device nodes, a FIFO and a symlink and chowns a file, all of it seen again
//! after a remount, while the host holds only regular files.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use wasm9p_server::{ExportConfig, SecurityModel, ServerConfig};
use wasm9p_tests::linux_vm::{run_vm, vm_prerequisites};
use wasm9p_tests::{TestServer, Tree};

const MODES: [&str; 2] = ["none", "loose"];

/// Runs inside the guest with MODE set; prints `CHECK <mode> <name> ok|FAIL`.
const GUEST_SCRIPT: &str = r#"#!/bin/sh
M=/mnt/$MODE
W=$M/work
check() {
  if sh -c "$2" >/tmp/out 2>&1; then echo "CHECK $MODE $1 ok"; else echo "CHECK $MODE $1 FAIL: $(head -c 300 /tmp/out)"; fi
}
check mkdir "mkdir $W && [ -d $W ]"
check create-write-read "echo hello > $W/f && [ \"\$(cat $W/f)\" = hello ]"
check append "echo again >> $W/f && [ \"\$(wc -l < $W/f)\" -eq 2 ]"
check truncate "truncate -s 3 $W/f && [ \"\$(cat $W/f)\" = hel ] && [ \"\$(stat -c %s $W/f)\" -eq 3 ]"
check chmod "chmod 640 $W/f && [ \"\$(stat -c %a $W/f)\" = 640 ]"
check symlink-readlink "ln -s f $W/l && [ \"\$(readlink $W/l)\" = f ]"
check read-via-symlink "[ \"\$(cat $W/l)\" = hel ]"
check hardlink "ln $W/f $W/h && [ \"\$(stat -c %h $W/f)\" -eq 2 ]"
check rename "mv $W/h $W/h2 && [ -e $W/h2 ] && [ ! -e $W/h ]"
check rm "rm $W/h2 && [ ! -e $W/h2 ] && [ \"\$(stat -c %h $W/f)\" -eq 1 ]"
check mkdir-rmdir "mkdir $W/d && rmdir $W/d && [ ! -e $W/d ]"
check rmdir-nonempty-fails "mkdir $W/ne && : > $W/ne/x && ! rmdir $W/ne"
check readdir-500 "mkdir $W/many && i=0 && while [ \$i -lt 500 ]; do : > $W/many/e\$i; i=\$((i+1)); done && [ \"\$(ls $W/many | wc -l)\" -eq 500 ] && [ \"\$(ls -a $W/many | wc -l)\" -eq 502 ]"
check cp-r-diff "cp -r $M/src $W/copy && diff -r $M/src $W/copy"
check existing-tree "[ \"\$(cat $M/src/deep/er/file.c)\" = 'int x;' ] && [ \"\$(readlink $M/src/link)\" = deep/er/file.c ]"
check missing-is-enoent "! cat $M/no/such/file 2>/dev/null && ! [ -e $M/nope ]"
check statfs "df $M | tail -n1 | grep -q ' '"
check control-must-fail "false"
check dotdot-stays-inside "[ \"\$(cd $M/.. && ls $M/src/.. | grep -c src)\" -eq 1 ]"
"#;

/// Runs inside the guest on the mapped export with PHASE `make` (then the checks make
/// what they check) or `again` (after a remount: only the checks).
const MAPPED_SCRIPT: &str = r#"#!/bin/sh
M=/mnt/mapped
check() {
  if sh -c "$2" >/tmp/out 2>&1; then echo "CHECK mapped-$PHASE $1 ok"; else echo "CHECK mapped-$PHASE $1 FAIL: $(head -c 300 /tmp/out)"; fi
}
make() { [ "$PHASE" = make ] && sh -c "$1"; return 0; }
make "mknod $M/null c 1 3 && mknod $M/disk b 8 17 && mkfifo $M/fifo"
make "echo mine > $M/owned && chown 1234:5678 $M/owned && chmod 640 $M/owned && ln -s owned $M/link"
check char-device "[ -c $M/null ] && [ \"\$(stat -c '%t %T' $M/null)\" = '1 3' ]"
check block-device "[ -b $M/disk ] && [ \"\$(stat -c '%t %T' $M/disk)\" = '8 11' ]"
check fifo "[ -p $M/fifo ]"
check owner-and-mode "[ \"\$(stat -c '%u %g %a' $M/owned)\" = '1234 5678 640' ]"
check symlink "[ \"\$(readlink $M/link)\" = owned ] && [ \"\$(cat $M/link)\" = mine ]"
check control-must-fail "false"
"#;

/// The checks of [`MAPPED_SCRIPT`], in each phase.
const MAPPED_CHECKS: usize = 6;

fn export(mode: &str) -> tempfile::TempDir {
    Tree::build(&[Tree::Dir(
        "src",
        vec![
            Tree::file("main.c", "int main(void) { return 0; }\n"),
            Tree::Dir(
                "deep",
                vec![Tree::Dir("er", vec![Tree::file("file.c", "int x;")])],
            ),
            Tree::Symlink("link", "deep/er/file.c"),
            Tree::File(
                "blob.bin",
                (0..300_000u32).map(|i| (i % 253) as u8).collect(),
            ),
            Tree::file(
                if mode == "none" {
                    "only-none"
                } else {
                    "only-loose"
                },
                mode,
            ),
        ],
    )])
}

#[test]
fn linux_client_works_in_cache_none_and_loose() {
    if let Err(missing) = vm_prerequisites() {
        panic!("{missing} (scripts/test installs and fetches these)");
    }
    let dirs: Vec<_> = MODES.iter().map(|m| export(m)).collect();
    let mut exports: Vec<ExportConfig> = MODES
        .iter()
        .zip(&dirs)
        .map(|(m, d)| ExportConfig {
            name: Some(m.to_string()),
            ..ExportConfig::new(d.path())
        })
        .collect();
    let mapped = tempfile::tempdir().unwrap();
    exports.push(ExportConfig {
        name: Some("mapped".into()),
        security_model: SecurityModel::MappedXattr,
        ..ExportConfig::new(mapped.path())
    });
    let server = TestServer::start(
        ServerConfig {
            exports,
            ..Default::default()
        },
        "tcp:127.0.0.1:0",
    );
    let port = match server.addr {
        wasm9p_proto::Addr::Tcp { port, .. } => port,
        _ => unreachable!(),
    };
    let body = MODES
        .iter()
        .map(|m| {
            format!(
                "mkdir -p /mnt/{m}\n\
                 if mount -t 9p -o trans=tcp,port=$PORT,version=9p2000.L,aname={m},cache={m},msize=262144 10.0.2.2 /mnt/{m}; \
                 then echo MOUNTED {m}; MODE={m} sh /etc/check.sh; umount /mnt/{m} && echo UMOUNTED {m}; \
                 else echo MOUNT-FAIL {m}; fi\n"
            )
        })
        .collect::<String>();
    let mapped_mount = "mount -t 9p -o trans=tcp,port=$PORT,version=9p2000.L,aname=mapped,cache=none,msize=262144 10.0.2.2 /mnt/mapped";
    let body = format!(
        "{body}mkdir -p /mnt/mapped\n\
         for PHASE in make again; do export PHASE; \
         if {mapped_mount}; then sh /etc/mapped.sh; umount /mnt/mapped && echo UMOUNTED mapped-$PHASE; \
         else echo MOUNT-FAIL mapped; fi; done\n"
    );
    let console = run_vm(
        &body,
        &[
            ("etc/check.sh", GUEST_SCRIPT),
            ("etc/mapped.sh", MAPPED_SCRIPT),
        ],
        port,
        Duration::from_secs(240),
    );

    let checks: Vec<&str> = console
        .lines()
        .filter(|l| l.starts_with("CHECK "))
        .collect();
    eprintln!("{}", checks.join("\n"));
    // The harness can fail: its control check must have.
    for m in MODES {
        assert!(
            checks
                .iter()
                .any(|l| l.starts_with(&format!("CHECK {m} control-must-fail FAIL"))),
            "{console}"
        );
    }
    let failed: Vec<&&str> = checks
        .iter()
        .filter(|l| !l.ends_with(" ok") && !l.contains("control-must-fail"))
        .collect();
    assert!(
        !console.contains("INSMOD-FAIL"),
        "module load failed:\n{console}"
    );
    for m in MODES {
        assert!(
            console.contains(&format!("MOUNTED {m}")),
            "mount {m} failed:\n{console}"
        );
        assert!(
            console.contains(&format!("UMOUNTED {m}")),
            "umount {m} failed:\n{console}"
        );
        let count = checks
            .iter()
            .filter(|l| l.starts_with(&format!("CHECK {m} ")))
            .count();
        assert_eq!(count, 19, "every check ran for {m}:\n{console}");
    }
    for phase in ["make", "again"] {
        assert!(
            console.contains(&format!("UMOUNTED mapped-{phase}")),
            "the mapped export, {phase}:\n{console}"
        );
        let count = checks
            .iter()
            .filter(|l| l.starts_with(&format!("CHECK mapped-{phase} ")))
            .count();
        assert_eq!(count, MAPPED_CHECKS, "mapped-{phase}:\n{console}");
        assert!(
            checks
                .iter()
                .any(|l| l.starts_with(&format!("CHECK mapped-{phase} control-must-fail FAIL"))),
            "{console}"
        );
    }
    assert!(
        failed.is_empty(),
        "failed checks: {failed:#?}\nconsole:\n{console}"
    );
    // The mapped export's host directory: regular files only, the device's mode kept
    // in its attribute.
    for entry in std::fs::read_dir(mapped.path()).unwrap() {
        let path = entry.unwrap().path();
        let ft = std::fs::symlink_metadata(&path).unwrap().file_type();
        assert!(ft.is_file(), "{} is {ft:?} on the host", path.display());
    }
    let mut mode = [0u8; 4];
    let n = rustix::fs::lgetxattr(mapped.path().join("null"), "user.virtfs.mode", &mut mode)
        .expect("the device's mode attribute");
    assert_eq!(u32::from_le_bytes(mode) & 0o170000, 0o020000, "{n} bytes");

    // What the guest did is on the host, exactly.
    for (m, dir) in MODES.iter().zip(&dirs) {
        let work = dir.path().join("work");
        assert_eq!(std::fs::read(work.join("f")).unwrap(), b"hel", "{m}");
        assert_eq!(
            std::fs::metadata(work.join("f")).unwrap().mode() & 0o777,
            0o640,
            "{m}"
        );
        assert_eq!(
            std::fs::read_link(work.join("l")).unwrap().to_str(),
            Some("f"),
            "{m}"
        );
        assert_eq!(
            std::fs::read_dir(work.join("many")).unwrap().count(),
            500,
            "{m}"
        );
        assert_eq!(
            std::fs::read(work.join("copy/blob.bin")).unwrap(),
            std::fs::read(dir.path().join("src/blob.bin")).unwrap(),
            "{m}"
        );
        assert!(!work.join("d").exists() && !work.join("h2").exists(), "{m}");
    }
}
