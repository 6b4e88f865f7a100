//! Linux VMs for tests: a Debian kernel booted under QEMU (TCG) with a busybox initramfs
//! that loads some modules and runs a shell script, whose console output is returned.
//!
//! Two uses: the real Linux 9p client mounting a 9P server on the host over
//! `-netdev user` (the guest reaches the host's 127.0.0.1 as 10.0.2.2; [`run_vm`]), and
//! `wasm9p` itself inside a VM reaching the host over virtio-vsock ([`Vm`] with
//! [`VSOCK_MODULES`], a vhost-user-vsock device and [`Vm::program`]).
//!
//! The kernel and modules come from `scripts/fetch-linux-kernel` (Debian's package),
//! busybox from Debian's `busybox-static`, QEMU from `qemu-system-x86`; `scripts/test`
//! installs all three. The initramfs is written here as a newc cpio archive.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Modules, in load order, that a 9p-over-tcp mount needs on Debian's 6.1 kernel.
pub const MODULES: [&str; 6] = ["netfs", "fscache", "9pnet", "9pnet_fd", "9p", "e1000"];

/// Modules, in load order, for a virtio-vsock device on a PCI bus (Debian builds the
/// virtio PCI stack as modules too).
pub const VSOCK_MODULES: [&str; 8] = [
    "virtio_ring",
    "virtio",
    "virtio_pci_legacy_dev",
    "virtio_pci_modern_dev",
    "virtio_pci",
    "vsock",
    "vmw_vsock_virtio_transport_common",
    "vmw_vsock_virtio_transport",
];

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

/// A VM to boot: what its initramfs holds, which modules its init loads, and what QEMU
/// is given besides the kernel.
pub struct Vm {
    modules: Vec<String>,
    files: Vec<(String, u32, Vec<u8>)>,
    dirs: Vec<String>,
    qemu_args: Vec<OsString>,
    cmdline: String,
    memory_mib: u32,
    network: bool,
}

impl Vm {
    /// A VM loading `modules` (names of .ko files in [`kernel_dir`], in load order).
    pub fn new(modules: &[&str]) -> Self {
        Vm {
            modules: modules.iter().map(|m| m.to_string()).collect(),
            files: Vec::new(),
            dirs: Vec::new(),
            qemu_args: Vec::new(),
            cmdline: String::new(),
            memory_mib: 512,
            network: false,
        }
    }

    /// Gives the VM an e1000 on QEMU's user network (10.0.2.15; the host is 10.0.2.2).
    pub fn with_user_network(mut self) -> Self {
        self.network = true;
        self
    }

    /// Sets the VM's memory size.
    pub fn with_memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib;
        self
    }

    /// Adds arguments to QEMU's command line.
    pub fn with_qemu_args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, args: I) -> Self {
        self.qemu_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds `key=value` to the kernel command line; the script reads it from
    /// /proc/cmdline.
    pub fn with_cmdline(mut self, param: &str) -> Self {
        self.cmdline.push(' ');
        self.cmdline.push_str(param);
        self
    }

    /// Puts a file in the initramfs at `path` (relative, no leading slash), with the
    /// directories above it.
    pub fn file(mut self, path: &str, perm: u32, data: Vec<u8>) -> Self {
        for dir in Path::new(path).ancestors().skip(1) {
            let dir = dir.to_str().unwrap().to_string();
            if !dir.is_empty() && !self.dirs.contains(&dir) {
                self.dirs.push(dir);
            }
        }
        self.files.push((path.to_string(), perm, data));
        self
    }

    /// Puts a dynamically linked host program in the initramfs at `path`, with its debug
    /// information stripped (`strip`), and every shared library `ldd` names at the same
    /// path as on the host, so that it runs inside the VM as it does here.
    pub fn program(mut self, host: &Path, path: &str) -> Self {
        let work = tempfile::tempdir().unwrap();
        let stripped = work.path().join("program");
        let out = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&stripped)
            .arg(host)
            .output()
            .expect("strip (binutils)");
        assert!(
            out.status.success(),
            "strip {}: {}",
            host.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        self = self.file(path, 0o755, std::fs::read(&stripped).unwrap());
        for lib in shared_libraries(host) {
            let rel = lib.strip_prefix("/").unwrap().to_str().unwrap().to_string();
            if !self.files.iter().any(|(p, _, _)| *p == rel) {
                let data = std::fs::read(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
                self = self.file(&rel, 0o755, data);
            }
        }
        self
    }

    /// Boots the VM, runs `body` (sh) after the modules are loaded, and returns the
    /// console output once it powers off. Panics when it has not within `timeout`, or
    /// when the script did not reach its end.
    pub fn run(self, body: &str, timeout: Duration) -> String {
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
        let mut dirs = self.dirs.clone();
        dirs.sort_by_key(|d| d.matches('/').count());
        for d in dirs
            .iter()
            .filter(|d| !["bin", "etc", "lib", "tmp", "mnt"].contains(&d.as_str()))
        {
            cpio.dir(d);
        }
        cpio.file(
            "bin/busybox",
            0o755,
            &std::fs::read("/bin/busybox").unwrap(),
        );
        cpio.file("init", 0o755, self.init_script(body).as_bytes());
        for m in &self.modules {
            cpio.file(
                &format!("lib/modules/{m}.ko"),
                0o644,
                &std::fs::read(dir.join(format!("{m}.ko")))
                    .unwrap_or_else(|e| panic!("{m}.ko: {e} (run scripts/fetch-linux-kernel)")),
            );
        }
        for (name, perm, data) in &self.files {
            cpio.file(name, *perm, data);
        }
        let work = tempfile::tempdir().unwrap();
        let initrd = work.path().join("initrd.cpio");
        std::fs::write(&initrd, cpio.finish()).unwrap();

        let mut qemu = Command::new("/usr/bin/qemu-system-x86_64");
        qemu.args([
            "-accel",
            "tcg",
            "-cpu",
            "max",
            "-smp",
            "1",
            "-nographic",
            "-no-reboot",
            "-nodefaults",
        ])
        .args(["-m", &format!("{}M", self.memory_mib)])
        .args(["-serial", "stdio"])
        .arg("-kernel")
        .arg(dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(&initrd)
        .args([
            "-append",
            &format!("console=ttyS0 panic=-1 quiet{}", self.cmdline),
        ]);
        if self.network {
            qemu.args(["-netdev", "user,id=n0", "-device", "e1000,netdev=n0"]);
        }
        qemu.args(&self.qemu_args);
        let mut child = qemu
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

    /// The init script: mount the kernel's filesystems, load the modules, bring up the
    /// network if there is one, then run `body`, print VM-DONE and power off.
    fn init_script(&self, body: &str) -> String {
        let modules = self.modules.join(" ");
        let network = if self.network {
            "ip link set eth0 up\nip addr add 10.0.2.15/24 dev eth0\n"
        } else {
            ""
        };
        format!(
            r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in {modules}; do insmod /lib/modules/$m.ko || echo "INSMOD-FAIL $m"; done
ip link set lo up
{network}{body}
echo VM-DONE
poweroff -f
"#
        )
    }
}

/// The shared libraries `ldd` lists for `program`, the dynamic loader included.
fn shared_libraries(program: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(program).output().expect("ldd");
    assert!(out.status.success(), "ldd {}", program.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file.
            let path = line.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// Boots the kernel with the 9p modules and a user network, with an initramfs running
/// `body` (`$PORT` is `port`, for the server the host runs), and returns the console
/// output. `files` are (path, script) pairs put in the initramfs, executable.
pub fn run_vm(body: &str, files: &[(&str, &str)], port: u16, timeout: Duration) -> String {
    let mut vm = Vm::new(&MODULES)
        .with_user_network()
        .with_cmdline(&format!("wasm9p.port={port}"));
    for (name, text) in files {
        vm = vm.file(name, 0o755, text.as_bytes().to_vec());
    }
    let body = format!(
        "PORT=$(sed -n 's/.*wasm9p\\.port=\\([0-9]*\\).*/\\1/p' /proc/cmdline)\nexport PORT\n{body}"
    );
    vm.run(&body, timeout)
}
