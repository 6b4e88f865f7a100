//! A real containerd for the shim's tests: Debian's containerd and `ctr`, started here
//! with a root, state, sockets and configuration of its own in a temporary directory
//! (never the machine's `/run/containerd`), the shim under test first on its `PATH`.
//!
//! containerd and its shims run in a mount namespace of their own, with a tmpfs over
//! `/run`: runwasi keeps its containers' state under `/run/containerd/wasm9p`, and ctr's
//! FIFOs go to the temporary directory, so the machine's `/run/containerd` is never
//! touched, and whatever they mount goes with the namespace.
//!
//! One containerd serves a whole test binary; a watchdog process stops it, and any
//! shim it left, once the test process ends. Tests keep apart by containerd namespace
//! and container id. A test that restarts containerd ([`Containerd::restart`]) starts
//! one of its own ([`own_containerd_with_cri`]): the others' calls would fail while it
//! is down.
//!
//! Images are made here as OCI archives (a wasm file in an ordinary rootfs layer) and
//! imported with `ctr image import`; `ctr run --rootfs DIR` runs a directory without
//! an image.

#![allow(dead_code)] // each test binary uses its own part of this

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The shim under test.
pub const SHIM: &str = env!("CARGO_BIN_EXE_containerd-shim-wasm9p-v1");

/// The runtime's name.
pub const RUNTIME: &str = "io.containerd.wasm9p.v1";

/// Programs this big start on the baseline tier under the tests' shim (the default,
/// 4 MiB, would make the test of the tiers slow): the test guests are far smaller.
pub const TIER_FROM: u64 = 1 << 20;

/// The running containerd.
pub struct Containerd {
    /// Its temporary directory (root, state, sockets, log, shim config).
    pub dir: PathBuf,
    /// Its gRPC socket.
    pub address: PathBuf,
    /// The module cache the shim's configuration names.
    pub module_cache: PathBuf,
    /// The node-side sockets' directory the shim's configuration allows.
    pub node_dir: PathBuf,
    /// containerd's process (the shell `unshare` started became it; after a restart,
    /// the one `nsenter` became).
    child: Mutex<Child>,
    /// The environment containerd runs with.
    env: Vec<(&'static str, String)>,
}

/// The containerd of this test binary, started at first use (its CRI plugin off).
pub fn containerd() -> &'static Containerd {
    static CELL: OnceLock<Containerd> = OnceLock::new();
    CELL.get_or_init(|| Containerd::start(None, ""))
}

/// The containerd of this test binary with its CRI plugin on, started at first use;
/// `cri_config` makes its configuration (given the temporary directory, and the
/// configuration's lines that put its root, state and sockets there).
pub fn containerd_with_cri(cri_config: fn(&Path, &str) -> String) -> &'static Containerd {
    static CELL: OnceLock<Containerd> = OnceLock::new();
    CELL.get_or_init(|| Containerd::start(Some(cri_config), ""))
}

/// A containerd with its CRI plugin on for one test alone (one it may restart), its
/// directory told apart from the binary's shared one by `name`; stopped as the shared
/// one is, when the test process ends.
pub fn own_containerd_with_cri(cri_config: fn(&Path, &str) -> String, name: &str) -> Containerd {
    Containerd::start(Some(cri_config), name)
}

impl Containerd {
    fn start(cri_config: Option<fn(&Path, &str) -> String>, name: &str) -> Containerd {
        let dir = std::env::temp_dir().join(format!(
            "wasm9p-containerd-{}{}{name}",
            std::process::id(),
            if name.is_empty() { "" } else { "-" },
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let address = dir.join("containerd.sock");
        let module_cache = dir.join("modules");
        let node_dir = dir.join("node");
        std::fs::create_dir_all(&node_dir).unwrap();
        let places = format!(
            r#"root = "{root}"
state = "{state}"
[grpc]
  address = "{address}"
[ttrpc]
  address = "{address}.ttrpc"
[debug]
  level = "info"
"#,
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            address = address.display(),
        );
        let config = match cri_config {
            Some(make) => make(&dir, &places),
            None => {
                format!("version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n{places}")
            }
        };
        std::fs::write(dir.join("config.toml"), config).unwrap();
        std::fs::write(
            dir.join("shim.toml"),
            format!(
                "module_cache = \"{}\"\nnode_sources = [\"unix:{}/\"]\ntier_from = {}\n",
                module_cache.display(),
                node_dir.display(),
                TIER_FROM,
            ),
        )
        .unwrap();
        let shim_dir = Path::new(SHIM).parent().unwrap();
        let path = format!(
            "{}:{}",
            shim_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let env = vec![
            ("PATH", path),
            (
                "WASM9P_SHIM_CONFIG",
                dir.join("shim.toml").display().to_string(),
            ),
        ];
        let mut unshare = Command::new("unshare");
        unshare
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mount -t tmpfs tmpfs /run && exec containerd --config \"$1\"")
            .arg("sh")
            .arg(dir.join("config.toml"));
        let child = spawn_logged(unshare, &dir, &env);
        let started = Containerd {
            dir,
            address,
            module_cache,
            node_dir,
            child: Mutex::new(child),
            env,
        };
        started.answering();
        started
    }

    /// Stops containerd (SIGTERM, as a node's service manager does; its shims and their
    /// tasks go on) and starts it again in the same mount namespace, with the same
    /// configuration, root and state: a restart on a node. Returns once it answers.
    pub fn restart(&self) {
        let mut child = self.child.lock().unwrap();
        // The mount namespace, held open while no process of ours is in it but the
        // shims.
        let namespace =
            std::fs::File::open(format!("/proc/{}/ns/mnt", child.id())).expect("its namespace");
        let _ = Command::new("kill").arg(child.id().to_string()).status();
        let status = child.wait().unwrap();
        assert!(
            status.success() || status.code().is_none(),
            "containerd ended with {status:?} when stopped"
        );
        let mut nsenter = Command::new("nsenter");
        nsenter
            .arg(format!(
                "--mount=/proc/{}/fd/{}",
                std::process::id(),
                namespace.as_raw_fd()
            ))
            .arg("--")
            .args(["containerd", "--config"])
            .arg(self.dir.join("config.toml"));
        *child = spawn_logged(nsenter, &self.dir, &self.env);
        drop(child);
        self.answering();
    }

    /// Waits for containerd to answer (30 s at most).
    fn answering(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .ctr("default")
            .arg("version")
            .output()
            .unwrap()
            .status
            .success()
        {
            assert!(
                Instant::now() < deadline,
                "containerd did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `ctr` against this containerd, in `namespace`.
    pub fn ctr(&self, namespace: &str) -> Command {
        let mut ctr = Command::new("ctr");
        ctr.arg("--address")
            .arg(&self.address)
            .args(["-n", namespace]);
        ctr
    }

    /// `ctr run --rm --runtime io.containerd.wasm9p.v1`, its FIFOs in the temporary
    /// directory; the rest of the command is the caller's.
    pub fn ctr_run(&self, namespace: &str) -> Command {
        let mut ctr = self.ctr(namespace);
        ctr.args(["run", "--rm", "--runtime", RUNTIME, "--fifo-dir"])
            .arg(self.dir.join("fifo"));
        ctr
    }

    /// The mounts in containerd's mount namespace (where it mounts images' rootfs).
    pub fn mounts(&self) -> String {
        let pid = self.child.lock().unwrap_or_else(|e| e.into_inner()).id();
        std::fs::read_to_string(format!("/proc/{pid}/mounts")).expect("containerd's mounts")
    }

    /// Imports an image of one ordinary rootfs layer holding `files`, named `name`,
    /// into `namespace`.
    pub fn import(
        &self,
        namespace: &str,
        name: &str,
        entrypoint: &[&str],
        files: &[(&str, &[u8])],
    ) {
        self.import_as(namespace, name, entrypoint, "", files)
    }

    /// As [`Containerd::import`], the image's process run as `user` (`UID:GID`).
    pub fn import_as(
        &self,
        namespace: &str,
        name: &str,
        entrypoint: &[&str],
        user: &str,
        files: &[(&str, &[u8])],
    ) {
        let archive = tempfile::NamedTempFile::new().unwrap();
        image_archive_as(name, entrypoint, user, files, archive.path());
        let import = self
            .ctr(namespace)
            .args(["image", "import"])
            .arg(archive.path())
            .output()
            .unwrap();
        assert!(import.status.success(), "{:?}", text(&import));
    }

    /// containerd's log so far (the shims' logs are in it).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
    }

    /// The log lines about container `id`.
    pub fn log_of(&self, id: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|line| line.contains(id))
            .map(str::to_owned)
            .collect()
    }

    /// `ctr run --rm --runtime io.containerd.wasm9p.v1 OPTIONS... IMAGE-OR-ROOTFS ID
    /// ARGS...`, its output once it ends (bounded by `timeout`).
    pub fn run(
        &self,
        namespace: &str,
        options: &[&str],
        what: &str,
        id: &str,
        args: &[&str],
    ) -> Output {
        let mut ctr = self.ctr_run(namespace);
        ctr.args(options).arg(what).arg(id).args(args);
        let output = output_within(ctr, Duration::from_secs(120));
        let stderr = text(&output).1;
        if output.status.success() || !stderr.contains(STATE_RACE) {
            return output;
        }
        let code = self.remove_after_state_race(namespace, id);
        let status = std::os::unix::process::ExitStatusExt::from_raw(code << 8);
        let stderr: String = stderr
            .lines()
            .filter(|line| !line.contains(STATE_RACE))
            .map(|line| format!("{line}\n"))
            .collect();
        Output {
            status,
            stdout: output.stdout,
            stderr: stderr.into_bytes(),
        }
    }

    /// What a user does when `ctr run --rm` ended on [`STATE_RACE`]: `ctr task rm`
    /// again until the task's state says it stopped, then `ctr container rm` (its
    /// snapshot goes with it). The task's exit code: `ctr task rm` warns of one that is
    /// not 0 (and itself exits 0).
    pub fn remove_after_state_race(&self, namespace: &str, id: &str) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut rm = self.ctr(namespace);
            rm.args(["task", "rm", id]);
            let removed = output_within(rm, Duration::from_secs(30));
            let said = text(&removed).1;
            if !said.contains(STATE_RACE) {
                assert!(removed.status.success(), "ctr task rm {id}: {said}");
                let code = said
                    .split("exit with non-zero exit code ")
                    .nth(1)
                    .map(|rest| {
                        let digits = rest.split(|c: char| !c.is_ascii_digit()).next();
                        digits.and_then(|d| d.parse().ok()).expect(&said)
                    })
                    .unwrap_or(0);
                let mut rm = self.ctr(namespace);
                rm.args(["container", "rm", id]);
                let gone = output_within(rm, Duration::from_secs(30));
                assert!(
                    gone.status.success(),
                    "ctr container rm {id}: {:?}",
                    text(&gone)
                );
                return code;
            }
            assert!(
                Instant::now() < deadline,
                "{id}: its state still says running 30 s after its exit was reported"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How `ctr run --rm` now and then ends although its task ended well: a race in
/// runwasi's shim library (containerd-shimkit 0.1.2, which the shim is built on). When
/// a task exits, two of the library's waiters (its answer to `Wait`, and the job that
/// sends the exit event, spawned at start) each take the task's state lock to mark it
/// exited; its answer to `State` tries that lock once (`now_or_never`) and says
/// RUNNING when the other waiter holds it, or is queued for it. ctr asks `State` right
/// after `Wait` answers, so now and then it refuses its own delete with this.
/// containerd's CRI deletes a task on its exit event, which the library sends only once
/// the state says exited, so a kubelet never meets it. docs/shim.md ("Known gaps") says
/// what to do.
pub const STATE_RACE: &str = "task must be stopped before deletion: running";

/// `command` (containerd, or what becomes it) started with `env`, its output appended
/// to `dir`'s `containerd.log`; once this process is gone, a watchdog stops it and the
/// shims it started, undoes the rootfs mounts they left and removes `dir`.
fn spawn_logged(mut command: Command, dir: &Path, env: &[(&str, String)]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("containerd.log"))
        .unwrap();
    let child = command
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("containerd (scripts/test installs Debian's containerd and runc)");
    let address = dir.join("containerd.sock");
    wasm9p_tests::when_this_process_ends(&format!(
        "kill {containerd}; pkill -f -- '{shims}'; sleep 1; pkill -9 -f -- '{shims}'; \
         rm -rf {dir}",
        containerd = child.id(),
        // Bracketed, so that the pattern does not match this shell's own command.
        shims = format!(
            "[c]ontainerd-shim-wasm9p-v1 .*-address {}",
            address.display()
        ),
        dir = dir.display(),
    ));
    child
}

/// containerd's plugins (`ctr plugins ls`: type, id, platforms, status) as a
/// containerd started on `config` reports them: started with a root, state and socket
/// of its own in a temporary directory, in a mount namespace of its own, and stopped
/// once they are read. For the installer's tests: whether a configuration leaves
/// containerd's CRI plugin loading.
pub fn plugins_under(config: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let address = dir.path().join("containerd.sock");
    let log = std::fs::File::create(dir.path().join("containerd.log")).unwrap();
    let _containerd = wasm9p_tests::Reaped::spawn(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(
                "mount -t tmpfs tmpfs /run && \
                 exec containerd --config \"$1\" --root \"$2/root\" --state \"$2/state\" \
                 --address \"$2/containerd.sock\"",
            )
            .arg("sh")
            .arg(config)
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut ctr = Command::new("ctr");
        ctr.arg("--address").arg(&address).args(["plugins", "ls"]);
        let listed = output_within(ctr, Duration::from_secs(30));
        if listed.status.success() {
            return text(&listed).0;
        }
        assert!(
            Instant::now() < deadline,
            "containerd did not start on {}: {}",
            config.display(),
            std::fs::read_to_string(dir.path().join("containerd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The command's output, or a panic once `timeout` passes (the child is killed).
pub fn output_within(mut command: Command, timeout: Duration) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{command:?} did not end within {timeout:?}");
        }
    }
}

/// The text of an output's stdout and stderr.
pub fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A rootfs directory of its own for one container: `files` (path, bytes) under it.
pub fn rootfs(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, bytes) in files {
        let full = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }
    dir
}

/// An OCI image archive of one ordinary rootfs layer holding `files`, its entrypoint
/// `entrypoint`, named `name`: what `ctr image import` takes.
pub fn image_archive(name: &str, entrypoint: &[&str], files: &[(&str, &[u8])], out: &Path) {
    image_archive_as(name, entrypoint, "", files, out)
}

/// As [`image_archive`], its process run as `user` (`UID:GID`; empty: root).
pub fn image_archive_as(
    name: &str,
    entrypoint: &[&str],
    user: &str,
    files: &[(&str, &[u8])],
    out: &Path,
) {
    let layer = layer_tar(files);
    let layer_digest = sha256(&layer);
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Entrypoint": entrypoint, "WorkingDir": "/", "User": user },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    })
    .to_string()
    .into_bytes();
    let config_digest = sha256(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest, "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest, "size": layer.len(),
        }],
    })
    .to_string()
    .into_bytes();
    let manifest_digest = sha256(&manifest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": manifest.len(),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": "latest",
            },
        }],
    })
    .to_string()
    .into_bytes();
    let blob = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let mut archive = tar::Builder::new(std::fs::File::create(out).unwrap());
    for (path, bytes) in [
        (
            "oci-layout".to_owned(),
            &br#"{"imageLayoutVersion":"1.0.0"}"#[..],
        ),
        ("index.json".to_owned(), &index[..]),
        (blob(&manifest_digest), &manifest[..]),
        (blob(&config_digest), &config[..]),
        (blob(&layer_digest), &layer[..]),
    ] {
        append(&mut archive, &path, bytes, 0o644);
    }
    archive.finish().unwrap();
}

fn layer_tar(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut layer = tar::Builder::new(Vec::new());
    for (path, bytes) in files {
        append(&mut layer, path.trim_start_matches('/'), bytes, 0o755);
    }
    layer.into_inner().unwrap()
}

fn append<W: Write>(archive: &mut tar::Builder<W>, path: &str, bytes: &[u8], mode: u32) {
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(mode);
    header.set_mtime(1_700_000_000);
    header.set_cksum();
    archive.append_data(&mut header, path, bytes).unwrap();
}

fn sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}
