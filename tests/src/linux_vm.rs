//! The real Linux 9p client: a Debian kernel booted under QEMU (TCG) with a busybox
//! initramfs that mounts a 9P server on the host over `-netdev user` (the guest reaches
//! the host's 127.0.0.1 as 10.0.2.2) and runs a shell script against the mounts.
//!
//! The kernel and modules come from `scripts/fetch-linux-kernel` (Debian's package),
//! busybox from Debian's `busybox-static`, QEMU from `qemu-system-x86`; `scripts/test`
//! installs all three. The initramfs is written here as a newc cpio archive.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Modules, in load order, that a 9p-over-tcp mount needs on Debian's 6.1 kernel.
pub const MODULES: [&str; 6] = ["netfs", "fscache", "9pnet", "9pnet_fd", "9p", "e1000"];

/// Where `scripts/fetch-linux-kernel` puts the kernel by default.
pub fn kernel_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/linux-kernel")
}

/// What is missing to boot a VM, if anything (with the command that fixes it).
pub fn vm_prerequisites() -> Result<(), String> {
    let dir = kernel_dir();
    if !dir.join("vmlinuz").exists() {
        return Err(format!(
            "no kernel in {}: run scripts/fetch-linux-kernel",
            dir.display()
        ));
    }
    for tool in ["/usr/bin/qemu-system-x86_64", "/bin/busybox"] {
        if !Path::new(tool).exists() {
            return Err(format!(
                "{tool} missing: apt-get install qemu-system-x86 busybox-static"
            ));
        }
    }
    Ok(())
}

/// A newc ("070701") cpio archive being written in memory.
#[derive(Default)]
pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        self.out.extend_from_slice(b"070701");
        for f in fields {
            self.out.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    /// Adds a directory.
    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[]);
    }

    /// Adds a file with permission bits `perm`.
    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, data);
    }

    /// The finished archive.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}

/// The init script: load modules, bring up the network, then run `body` (sh).
fn init_script(body: &str) -> String {
    let modules = MODULES.join(" ");
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in {modules}; do insmod /lib/modules/$m.ko || echo "INSMOD-FAIL $m"; done
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
PORT=$(sed -n 's/.*wasm9p\.port=\([0-9]*\).*/\1/p' /proc/cmdline)
export PORT
{body}
echo VM-DONE
poweroff -f
"#
    )
}

/// Boots the kernel with an initramfs running `body` and returns the console output.
/// `port` is passed on the kernel command line (`$PORT` in the script).
pub fn run_vm(body: &str, files: &[(&str, &str)], port: u16, timeout: Duration) -> String {
    let dir = kernel_dir();
    let mut cpio = Cpio::default();
    for d in [
        "bin",
        "proc",
        "sys",
        "dev",
        "mnt",
        "tmp",
        "etc",
        "lib",
        "lib/modules",
    ] {
        cpio.dir(d);
    }
    cpio.file(
        "bin/busybox",
        0o755,
        &std::fs::read("/bin/busybox").unwrap(),
    );
    cpio.file("init", 0o755, init_script(body).as_bytes());
    for m in MODULES {
        cpio.file(
            &format!("lib/modules/{m}.ko"),
            0o644,
            &std::fs::read(dir.join(format!("{m}.ko"))).unwrap(),
        );
    }
    for (name, text) in files {
        cpio.file(name, 0o755, text.as_bytes());
    }
    let work = tempfile::tempdir().unwrap();
    let initrd = work.path().join("initrd.cpio");
    std::fs::write(&initrd, cpio.finish()).unwrap();

    let mut child = Command::new("/usr/bin/qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-m",
            "512M",
            "-smp",
            "1",
            "-nographic",
            "-no-reboot",
            "-nodefaults",
        ])
        .args(["-serial", "stdio"])
        .arg("-kernel")
        .arg(dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(&initrd)
        .args([
            "-append",
            &format!("console=ttyS0 panic=-1 quiet wasm9p.port={port}"),
        ])
        .args(["-netdev", "user,id=n0", "-device", "e1000,netdev=n0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qemu-system-x86_64");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    let deadline = Instant::now() + timeout;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "VM did not finish in {timeout:?}; console:\n{}",
                reader.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut stderr = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
    let console = reader.join().unwrap();
    assert!(
        console.contains("VM-DONE"),
        "VM did not run its script; qemu: {stderr}\nconsole:\n{console}"
    );
    console
}
