//! virtio-vsock end to end: `wasm9p run` inside a QEMU VM (Debian's 6.1 kernel, TCG)
//! mounts an export of a `wasm9p serve` running here, over the VM's vsock.
//!
//! ```text
//!  VM: wasm9p run --mount type=9p,source=vsock:2:PORT,...  (AF_VSOCK inside the guest)
//!        | virtio-vsock (vhost-user-vsock-pci)
//!  here: vhost-device-vsock --vm guest-cid=3,uds-path=UDS,socket=VHOST
//!        | a guest connection to CID 2 port P arrives at the Unix socket UDS_P
//!  here: wasm9p serve --listen fc-vsock:UDS:PORT  (listens on UDS_PORT)
//! ```
//!
//! No AF_VSOCK socket is opened on this machine: the guest's vsock ends at
//! vhost-device-vsock, which speaks to Unix sockets only in `uds-path` mode.
//! `scripts/fetch-vhost-device-vsock` builds it (crates.io), `scripts/fetch-linux-kernel`
//! fetches the kernel with its virtio and vsock modules.
//!
//! The guest (`guests/export_tour.c`) reads, writes, lists, looks for missing headers and
//! follows symlinks; its transcript must be the one it prints on a bind mount of the same
//! tree here, and what it wrote must be in the export. A second run in the same VM asks
//! for a port nobody serves: it must fail with a message naming the address, quickly.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasm9p_tests::linux_vm::{kernel_dir, vm_prerequisites, Vm, VSOCK_MODULES};
use wasm9p_tests::{compile_c_guest, spawn_serve, Tree};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");
/// The cache modes the tour runs in, each on its own export (named by the mode).
const MODES: [&str; 2] = ["loose", "none"];
/// The port `wasm9p serve` listens on, and one nobody does.
const PORT: u32 = 5640;
const DEAD_PORT: u32 = 5641;

/// Children killed when the test ends, passing or not.
struct Reap(Vec<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn vhost_device_vsock() -> PathBuf {
    kernel_dir().join("../vhost-device-vsock/bin/vhost-device-vsock")
}

/// The tree the tour expects, built in `dir`.
fn build_tree(dir: &Path) {
    let blob: Vec<u8> = (0..1_500_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::create_dir_all(dir).unwrap();
    Tree::Dir(
        "src",
        vec![
            Tree::file("hello.txt", "hello\n"),
            Tree::File("blob.bin", blob),
            Tree::Symlink("link", "hello.txt"),
            Tree::Symlink("inc-link", "inc"),
            Tree::Symlink("dangling", "missing"),
            Tree::Dir(
                "inc",
                vec![
                    Tree::file("config.h", "#define X 1\n"),
                    Tree::file("header3.h", ""),
                ],
            ),
            Tree::Dir("sys", vec![Tree::file("header7.h", "")]),
            Tree::Dir("gen", vec![]),
            Tree::file("header12.h", ""),
        ],
    )
    .create_in(dir);
}

/// The lines between `BEGIN name` and `END name` on the VM's console.
fn section(console: &str, name: &str) -> String {
    let begin = format!("BEGIN {name}");
    let end = format!("END {name}");
    // A line may start with the terminal escapes SeaBIOS left.
    let mut lines = console
        .lines()
        .skip_while(|l| !l.trim_end().ends_with(&begin));
    assert!(
        lines.next().is_some(),
        "no {begin} on the console:\n{console}"
    );
    lines
        .take_while(|l| l.trim_end() != end)
        .map(|l| format!("{}\n", l.trim_end_matches('\r')))
        .collect()
}

/// The value printed after `key ` on the console (`RUN-EXIT 0`), on the first line that
/// has it.
fn value(console: &str, key: &str) -> String {
    console
        .lines()
        .find_map(|l| Some(l.trim_end().split_once(&format!("{key} "))?.1))
        .unwrap_or_else(|| panic!("no {key} on the console:\n{console}"))
        .to_string()
}

/// Waits until `path` exists (a socket a child creates).
fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn wasm9p_in_a_vm_mounts_an_export_over_virtio_vsock() {
    if let Err(missing) = vm_prerequisites() {
        panic!("{missing} (scripts/test installs and fetches these)");
    }
    assert!(
        vhost_device_vsock().exists(),
        "{} missing: run scripts/fetch-vhost-device-vsock",
        vhost_device_vsock().display()
    );
    let guest = compile_c_guest(&wasm9p_tests::guest_source("export_tour.c"));

    // What the tour prints on a bind mount here.
    let work = tempfile::tempdir().unwrap();
    let oracle = work.path().join("oracle");
    build_tree(&oracle);
    let out = Command::new(BIN)
        .arg("run")
        .arg("--mount")
        .arg(format!("type=bind,source={},target=/d", oracle.display()))
        .arg(&guest)
        .arg("/d")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = String::from_utf8(out.stdout).unwrap();

    // One export per cache mode, picked by aname (the directory's last component).
    let mut serve_args: Vec<std::ffi::OsString> = Vec::new();
    for mode in MODES {
        build_tree(&work.path().join(mode));
        serve_args.extend(["--export".into(), work.path().join(mode).into()]);
    }
    let uds = work.path().join("vm.vsock");
    let vhost = work.path().join("vhost.sock");
    let listen = format!("fc-vsock:{}:{PORT}", uds.display());
    serve_args.extend(["--listen".into(), listen.clone().into()]);
    // Another tenant's export on the same server: bound to a listener this VM does not
    // come through, it is not this VM's to attach.
    let other = work.path().join("other-tenant");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("secret.txt"), "not for this VM\n").unwrap();
    let elsewhere = format!("unix:{}", work.path().join("elsewhere.sock").display());
    serve_args.extend([
        "--export".into(),
        other.clone().into(),
        "--listen".into(),
        elsewhere.clone().into(),
        "--allow".into(),
        format!("other-tenant=listen:{elsewhere}").into(),
    ]);
    for mode in MODES {
        serve_args.extend(["--allow".into(), format!("{mode}=listen:{listen}").into()]);
    }
    let mut children = Reap(Vec::new());
    let (_serve, line) = spawn_serve(BIN, serve_args);
    assert!(line.contains("fc-vsock:"), "{line}");
    children.0.push(
        Command::new(vhost_device_vsock())
            .arg("--vm")
            .arg(format!(
                "guest-cid=3,socket={},uds-path={}",
                vhost.display(),
                uds.display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start vhost-device-vsock"),
    );
    wait_for(&vhost);

    let memory = 1024;
    let modes = MODES.join(" ");
    let body = format!(
        r#"export HOME=/root
mkdir -p /root
for m in {modes}; do
  wasm9p run --mount type=9p,source=vsock:2:{PORT},aname=$m,target=/d,cache=$m --stats=/tmp/stats-$m.json /guest.wasm /d >/tmp/out-$m 2>/tmp/err-$m
  echo "RUN-EXIT-$m $?"
  echo "BEGIN transcript-$m"; cat /tmp/out-$m; echo "END transcript-$m"
  echo "BEGIN stderr-$m"; cat /tmp/err-$m; echo "END stderr-$m"
  echo "BEGIN stats-$m"; cat /tmp/stats-$m.json; echo; echo "END stats-$m"
done
wasm9p run --mount type=9p,source=vsock:2:{PORT},aname=other-tenant,target=/d /guest.wasm /d >/tmp/out 2>&1
echo "OTHER-EXIT $?"
echo "BEGIN other"; cat /tmp/out; echo "END other"
start=$(date +%s)
wasm9p run --mount type=9p,source=vsock:2:{DEAD_PORT},target=/d /guest.wasm /d >/tmp/out 2>&1
echo "DEAD-EXIT $?"
echo "DEAD-SECONDS $(( $(date +%s) - start ))"
echo "BEGIN dead"; cat /tmp/out; echo "END dead"
"#
    );
    let console = Vm::new(&VSOCK_MODULES)
        .with_memory_mib(memory)
        .with_qemu_args([
            "-object".to_string(),
            format!("memory-backend-memfd,id=mem,size={memory}M,share=on"),
            "-machine".into(),
            "memory-backend=mem".into(),
            "-chardev".into(),
            format!("socket,id=vsock0,path={}", vhost.display()),
            "-device".into(),
            "vhost-user-vsock-pci,chardev=vsock0".into(),
        ])
        .program(Path::new(BIN), "bin/wasm9p")
        .file("guest.wasm", 0o644, std::fs::read(&guest).unwrap())
        .run(&body, Duration::from_secs(420));
    assert!(!console.contains("INSMOD-FAIL"), "{console}");

    let big: Vec<u8> = (0..30usize)
        .flat_map(|i| (0..10_000usize).map(move |j| ((i * 7 + j) % 251) as u8))
        .collect();
    for mode in MODES {
        assert_eq!(
            value(&console, &format!("RUN-EXIT-{mode}")),
            "0",
            "{console}"
        );
        let transcript = section(&console, &format!("transcript-{mode}"));
        assert_eq!(
            transcript,
            expected,
            "{mode}; stderr:\n{}",
            section(&console, &format!("stderr-{mode}"))
        );

        // The tour looks for each missing header twice: with the negative cache
        // (loose) the second look costs no walk, and once a directory's listing is read
        // (complete directories) neither does the first; without caches (none) every
        // look does. A dozen other missing names are looked up once each (a dangling
        // link, files before they are created, names after unlink and rename).
        let stats: serde_json::Value =
            serde_json::from_str(&section(&console, &format!("stats-{mode}")))
                .unwrap_or_else(|e| panic!("stats: {e}\n{console}"));
        let failed_walks = stats["mounts"][0]["failed_walks"].as_u64().unwrap();
        let missing: u64 = value(&transcript, "include search:")
            .split_whitespace()
            .skip_while(|w| *w != "missing")
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert!(missing > 300, "{transcript}");
        let expected_walks = match mode {
            "loose" => 0..=missing / 2 + 12,
            _ => missing..=missing + 12,
        };
        if mode == "loose" {
            let listed = stats["mounts"][0]["cache"]["listing_hits"]
                .as_u64()
                .unwrap();
            assert!(
                listed > 0,
                "loose: no lookup answered by a listing: {stats}"
            );
        }
        assert!(
            expected_walks.contains(&failed_walks),
            "{mode}: {failed_walks} failed walks for {missing} missing lookups: {stats}"
        );
        eprintln!("vsock VM run, cache={mode}: {stats}");

        // What the guest wrote is in the export.
        let out_dir = work.path().join(mode).join("out");
        assert_eq!(
            std::fs::read_to_string(out_dir.join("small.txt")).unwrap(),
            "written from the guest\nand appended\n"
        );
        assert!(
            std::fs::read(out_dir.join("big.bin")).unwrap() == big,
            "{mode}"
        );
        assert_eq!(
            std::fs::read_to_string(out_dir.join("renamed.txt")).unwrap(),
            "to be renamed"
        );
        assert_eq!(
            std::fs::read_link(out_dir.join("link")).unwrap(),
            Path::new("renamed.txt")
        );
        assert!(!out_dir.join("sub").exists() && !out_dir.join("doomed.txt").exists());
    }

    // Another tenant's export: refused from inside the VM, and nothing of it touched.
    assert_eq!(value(&console, "OTHER-EXIT"), "2", "{console}");
    let refused = section(&console, "other");
    assert!(
        refused.contains("attach \"other-tenant\"") && refused.contains("Permission denied"),
        "{refused}"
    );
    assert_eq!(std::fs::read_dir(&other).unwrap().count(), 1);

    // Nobody on the other port: a clear error, a failure status, no hang.
    assert_ne!(value(&console, "DEAD-EXIT"), "0", "{console}");
    let seconds: u64 = value(&console, "DEAD-SECONDS").parse().unwrap();
    assert!(seconds < 30, "the failed mount took {seconds} s");
    let dead = section(&console, "dead");
    assert!(
        dead.contains(&format!(
            "cannot mount /d: cannot connect to vsock:2:{DEAD_PORT}: "
        )) && dead.matches("vsock:2:").count() == 1,
        "the error names the address, once: {dead}"
    );
}
