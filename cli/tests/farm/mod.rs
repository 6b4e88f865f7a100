//! A real build farm for the worker's tests: a PostgreSQL cluster of its own,
//! BuildGrid 0.4.4 (`scripts/fetch-buildgrid`) on 127.0.0.1, and `wasm9p worker`s.
//!
//! One farm serves a whole test binary (starting PostgreSQL and BuildGrid takes
//! seconds); a watchdog process stops both when the test process ends. Tests keep
//! apart by a platform property: BuildGrid matches `pool`, each test's workers
//! announce a pool of the test's own, and its actions ask for it.
//!
//! Actions are sent by BuildGrid's own client (`bgd execute command`) where a user
//! would, and by [`Client`] (REAPI Execute over gRPC) where the test makes inputs no
//! client would (bad names, missing blobs).

#![allow(dead_code)] // each test binary uses its own part of this

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use wasm9p_remote::apis::v2;
use wasm9p_remote::cas::{Cas, Upload};
use wasm9p_remote::Digest;

pub const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

const PG: &str = "/usr/lib/postgresql/15/bin";

/// The running farm.
pub struct Farm {
    pub address: String,
    port: u16,
    pub bgd: PathBuf,
    dir: PathBuf,
    server: Mutex<Child>,
}

/// `bgd server start` of the farm in `dir` (its log appended to, its pid written for
/// the watchdog).
fn spawn_bgd(bgd: &Path, dir: &Path) -> Child {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(dir.join("bgd.log"))
        .unwrap();
    let server = Command::new(bgd)
        .args(["server", "start"])
        .arg(dir.join("bgd.yml"))
        .current_dir(dir)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    std::fs::write(dir.join("bgd.pid"), server.id().to_string()).unwrap();
    server
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `cmd` as the `postgres` user when this process is root (PostgreSQL refuses
/// to run as root), else as this user.
fn as_postgres(program: &str) -> Command {
    if rustix::process::geteuid().is_root() {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--", program]);
        cmd
    } else {
        Command::new(program)
    }
}

fn ok(what: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Farm {
    /// The test binary's farm, started on first use.
    pub fn get() -> &'static Farm {
        static FARM: OnceLock<Farm> = OnceLock::new();
        FARM.get_or_init(Farm::start)
    }

    fn start() -> Farm {
        let venv = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../scripts/fetch-buildgrid"
        ))
        .output()
        .expect("scripts/fetch-buildgrid");
        assert!(
            venv.status.success(),
            "{}",
            String::from_utf8_lossy(&venv.stderr)
        );
        let venv = PathBuf::from(String::from_utf8(venv.stdout).unwrap().trim());
        let bgd = venv.join("bin/bgd");
        // A directory that outlives the statics' missing drop; the watchdog removes it.
        let dir = std::env::temp_dir().join(format!("wasm9p-farm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["pg", "sock", "cas"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("pg.log"), "").unwrap();
        if rustix::process::geteuid().is_root() {
            for sub in ["pg", "sock", "pg.log"] {
                ok(
                    "chown",
                    Command::new("chown").arg("postgres").arg(dir.join(sub)),
                );
            }
        }
        let pg_port = free_port();
        let sock = dir.join("sock");
        ok(
            "initdb",
            as_postgres(&format!("{PG}/initdb"))
                .arg("-D")
                .arg(dir.join("pg"))
                .args(["-A", "trust", "-U", "postgres", "--no-sync"]),
        );
        ok(
            "pg_ctl start",
            as_postgres(&format!("{PG}/pg_ctl"))
                .arg("-D")
                .arg(dir.join("pg"))
                .arg("-o")
                .arg(format!(
                    "-k {} -p {pg_port} -c listen_addresses='' -c fsync=off -c max_connections=100",
                    sock.display()
                ))
                .arg("-l")
                .arg(dir.join("pg.log"))
                .args(["-w", "start"]),
        );
        ok(
            "createdb",
            as_postgres(&format!("{PG}/createdb"))
                .arg("-h")
                .arg(&sock)
                .args(["-p", &pg_port.to_string(), "bgd"]),
        );
        let url = format!(
            "postgresql+psycopg2://postgres@/bgd?host={}&port={pg_port}",
            sock.display()
        );
        ok(
            "bgd migrate",
            Command::new(&bgd).args(["migrate", "apply", &url]),
        );
        let port = free_port();
        let config = dir.join("bgd.yml");
        std::fs::write(&config, config_text(port, &url, &dir.join("cas"))).unwrap();
        let server = spawn_bgd(&bgd, &dir);
        // Stops BuildGrid (whichever process it is by then) and PostgreSQL once this
        // process is gone.
        wasm9p_tests::when_this_process_ends(&format!(
            "kill $(cat {dir}/bgd.pid); {stop} -D {pg} -m immediate stop >/dev/null 2>&1; \
             rm -rf {dir}",
            stop = if rustix::process::geteuid().is_root() {
                format!("runuser -u postgres -- {PG}/pg_ctl")
            } else {
                format!("{PG}/pg_ctl")
            },
            pg = dir.join("pg").display(),
            dir = dir.display(),
        ));
        let farm = Farm {
            address: format!("grpc://127.0.0.1:{port}"),
            port,
            bgd,
            dir,
            server: Mutex::new(server),
        };
        farm.wait_until_listening();
        farm
    }

    fn wait_until_listening(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "BuildGrid did not start: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops BuildGrid, runs `meanwhile`, and starts it again on the same port and
    /// database (its jobs and bot sessions are in PostgreSQL).
    pub fn restart_scheduler(&self, meanwhile: impl FnOnce()) {
        let mut server = self.server.lock().unwrap();
        let _ = server.kill();
        let _ = server.wait();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            std::thread::sleep(Duration::from_millis(50));
        }
        meanwhile();
        *server = spawn_bgd(&self.bgd, &self.dir);
        drop(server);
        self.wait_until_listening();
    }

    /// BuildGrid's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("bgd.log")).unwrap_or_default()
    }

    /// `bgd execute --remote ... command` with `args`, in `cwd`.
    pub fn bgd_execute(&self, cwd: &Path, args: &[&str]) -> std::process::Output {
        Command::new(&self.bgd)
            .current_dir(cwd)
            .args(["execute", "--remote"])
            .arg(self.address.replace("grpc://", "http://"))
            .arg("command")
            .args(args)
            .output()
            .unwrap()
    }
}

/// BuildGrid's configuration (`buildgrid.yml`, shared with bench/farm.py): one
/// instance (named ""), its scheduler on PostgreSQL, bots matched on OSFamily, ISA and
/// pool, short keepalives so that a killed bot's leases go to another soon.
fn config_text(port: u16, url: &str, cas: &Path) -> String {
    include_str!("buildgrid.yml")
        .replace("@PORT@", &port.to_string())
        .replace("@URL@", url)
        .replace("@CAS@", &cas.display().to_string())
}

/// A `wasm9p worker` of the farm, in a pool.
pub struct Worker {
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Worker {
    /// A worker for `pool`, with `extra` options.
    pub fn start(farm: &Farm, pool: &str, extra: &[&str]) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(farm, pool, extra, dir)
    }

    /// A worker with its cache directory in `dir` (as a restarted one would have).
    pub fn start_in(farm: &Farm, pool: &str, extra: &[&str], dir: tempfile::TempDir) -> Worker {
        Self::start_with(farm, pool, extra, dir, &module_cache())
    }

    /// As [`Worker::start_in`], its compiled code kept in `modules`.
    pub fn start_with(
        farm: &Farm,
        pool: &str,
        extra: &[&str],
        dir: tempfile::TempDir,
        modules: &Path,
    ) -> Worker {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(dir.path().join("worker.log"))
            .unwrap();
        let child = Command::new(BIN)
            .arg("worker")
            .arg("--scheduler")
            .arg(&farm.address)
            .arg("--cache-dir")
            .arg(dir.path())
            .arg(format!("--property=pool={pool}"))
            .arg("--stats")
            .arg(dir.path().join("stats.jsonl"))
            .arg("--module-cache")
            .arg(modules)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let worker = Worker { child, dir };
        worker.wait_for_log("worker: session", Duration::from_secs(60));
        worker
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("worker.log")).unwrap_or_default()
    }

    /// Waits until the worker's log says `what`.
    pub fn wait_for_log(&self, what: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while !self.log().contains(what) {
            assert!(Instant::now() < deadline, "no {what:?} in: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its `--stats` action lines so far.
    pub fn actions(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("stats.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get("action").cloned())
            .collect()
    }

    /// Whether it runs an action now (an action's scratch directory is there).
    pub fn is_running(&self) -> bool {
        std::fs::read_dir(self.dir.path().join("actions")).is_ok_and(|mut d| d.next().is_some())
    }

    /// Waits until it runs an action (its scratch directory is there).
    pub fn wait_until_running(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.is_running() {
            assert!(Instant::now() < deadline, "never taken: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and its directory back (for a restart).
    pub fn kill(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }

    /// SIGTERM, then its exit status.
    pub fn terminate(mut self, limit: Duration) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "still running: {}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the tests keep compiled modules (shared with the cc tests).
pub fn module_cache() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("module-cache")
}

/// An input root being made: files, symlinks and raw directory messages.
#[derive(Default)]
pub struct Root {
    files: BTreeMap<String, (Bytes, bool)>,
    symlinks: BTreeMap<String, String>,
}

/// An input root made: its digest and every blob it needs.
pub struct Made {
    pub digest: Digest,
    pub blobs: Vec<(Digest, Bytes)>,
}

impl Root {
    pub fn file(mut self, path: &str, bytes: impl Into<Bytes>, executable: bool) -> Root {
        self.files.insert(path.into(), (bytes.into(), executable));
        self
    }

    pub fn symlink(mut self, path: &str, target: &str) -> Root {
        self.symlinks.insert(path.into(), target.into());
        self
    }

    /// Every file of the host directory `dir`, under `at`.
    pub fn tree(mut self, at: &str, dir: &Path) -> Root {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let path = format!("{at}/{name}");
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                self = self.tree(&path, &entry.path());
            } else if kind.is_symlink() {
                let target = std::fs::read_link(entry.path()).unwrap();
                self = self.symlink(&path, target.to_str().unwrap());
            } else {
                use std::os::unix::fs::PermissionsExt;
                let exec = entry.metadata().unwrap().permissions().mode() & 0o111 != 0;
                self = self.file(&path, std::fs::read(entry.path()).unwrap(), exec);
            }
        }
        self
    }

    /// The Directory messages, `edit` given each before it is encoded (to make bad
    /// ones).
    pub fn make_with(self, edit: impl Fn(&str, &mut v2::Directory)) -> Made {
        #[derive(Default)]
        struct Dir {
            files: BTreeMap<String, (Bytes, bool)>,
            links: BTreeMap<String, String>,
            dirs: BTreeMap<String, Dir>,
        }
        let mut top = Dir::default();
        /// The directory `parts` (all but the last, the name) lead to, made as needed.
        fn place<'d>(dir: &'d mut Dir, parts: &[&str]) -> &'d mut Dir {
            match parts {
                [] | [_] => dir,
                [first, rest @ ..] => place(dir.dirs.entry((*first).to_owned()).or_default(), rest),
            }
        }
        let split = |path: &str| -> Vec<String> {
            path.split('/')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        };
        for (path, file) in &self.files {
            let parts = split(path);
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let name = parts.last().unwrap().clone();
            place(&mut top, &refs).files.insert(name, file.clone());
        }
        for (path, target) in &self.symlinks {
            let parts = split(path);
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let name = parts.last().unwrap().clone();
            place(&mut top, &refs).links.insert(name, target.clone());
        }
        let mut blobs = Vec::new();
        fn encode(
            dir: &Dir,
            path: &str,
            blobs: &mut Vec<(Digest, Bytes)>,
            edit: &dyn Fn(&str, &mut v2::Directory),
        ) -> Digest {
            let mut msg = v2::Directory::default();
            for (name, (bytes, exec)) in &dir.files {
                let d = Digest::of(bytes);
                blobs.push((d, bytes.clone()));
                msg.files.push(v2::FileNode {
                    name: name.clone(),
                    digest: Some(d.to_proto()),
                    is_executable: *exec,
                    node_properties: None,
                });
            }
            for (name, sub) in &dir.dirs {
                let d = encode(sub, &format!("{path}/{name}"), blobs, edit);
                msg.directories.push(v2::DirectoryNode {
                    name: name.clone(),
                    digest: Some(d.to_proto()),
                });
            }
            for (name, target) in &dir.links {
                msg.symlinks.push(v2::SymlinkNode {
                    name: name.clone(),
                    target: target.clone(),
                    node_properties: None,
                });
            }
            edit(path, &mut msg);
            let bytes = Bytes::from(msg.encode_to_vec());
            let d = Digest::of(&bytes);
            blobs.push((d, bytes));
            d
        }
        let digest = encode(&top, "", &mut blobs, &edit);
        Made { digest, blobs }
    }

    pub fn make(self) -> Made {
        self.make_with(|_, _| {})
    }
}

/// A REAPI client of the farm.
pub struct Client {
    pub runtime: tokio::runtime::Runtime,
    cas: Cas,
    channel: tonic::transport::Channel,
}

impl Client {
    pub fn new(farm: &Farm) -> Client {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let channel = {
            let _in = runtime.enter();
            wasm9p_remote::cas::channel(&farm.address).unwrap()
        };
        Client {
            cas: Cas::new(channel.clone(), ""),
            channel,
            runtime,
        }
    }

    /// Uploads `blobs` (all of them, whatever the CAS has).
    pub fn upload(&self, blobs: Vec<(Digest, Bytes)>) {
        let uploads = blobs
            .into_iter()
            .map(|(d, b)| Upload::Bytes(d, b))
            .collect();
        self.runtime.block_on(self.cas.upload(uploads)).unwrap();
    }

    /// A blob from the CAS.
    pub fn blob(&self, digest: &v2::Digest) -> Bytes {
        let d = Digest::from_proto(digest).unwrap();
        self.runtime.block_on(self.cas.read_blobs(&[d])).unwrap()[&d].clone()
    }

    /// The Action and Command of `args` in `pool` on the input root `root`, with their
    /// blobs (uploaded too).
    pub fn action(
        &self,
        root: Digest,
        args: &[&str],
        outputs: &[&str],
        pool: &str,
        timeout: Option<Duration>,
    ) -> Digest {
        let command = v2::Command {
            arguments: args.iter().map(|s| s.to_string()).collect(),
            output_paths: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let command_bytes = Bytes::from(command.encode_to_vec());
        let command_digest = Digest::of(&command_bytes);
        let platform = v2::Platform {
            properties: [("ISA", "wasm32"), ("OSFamily", "wasi"), ("pool", pool)]
                .into_iter()
                .map(|(name, value)| v2::platform::Property {
                    name: name.into(),
                    value: value.into(),
                })
                .collect(),
        };
        let action = v2::Action {
            command_digest: Some(command_digest.to_proto()),
            input_root_digest: Some(root.to_proto()),
            timeout: timeout.map(|t| wasm9p_remote::apis::protobuf::Duration {
                seconds: t.as_secs() as i64,
                nanos: t.subsec_nanos() as i32,
            }),
            do_not_cache: false,
            salt: Vec::new(),
            platform: Some(platform),
        };
        let action_bytes = Bytes::from(action.encode_to_vec());
        let action_digest = Digest::of(&action_bytes);
        self.upload(vec![
            (command_digest, command_bytes),
            (action_digest, action_bytes),
        ]);
        action_digest
    }

    /// Executes the action `digest` (the cache skipped): its operation's name once it
    /// is known, through `named`, and the response.
    pub fn execute(&self, digest: Digest, named: impl Fn(&str)) -> v2::ExecuteResponse {
        use wasm9p_remote::apis::v2::execution_client::ExecutionClient;
        self.runtime.block_on(async {
            let mut client =
                ExecutionClient::new(self.channel.clone()).max_decoding_message_size(64 << 20);
            let request = v2::ExecuteRequest {
                instance_name: String::new(),
                skip_cache_lookup: true,
                action_digest: Some(digest.to_proto()),
                ..Default::default()
            };
            let mut stream = client.execute(request).await.unwrap().into_inner();
            let mut told = false;
            while let Some(op) = stream.message().await.unwrap() {
                if !told {
                    named(&op.name);
                    told = true;
                }
                if op.done {
                    use wasm9p_remote::apis::longrunning::operation::Result;
                    return match op.result {
                        Some(Result::Response(any)) => {
                            v2::ExecuteResponse::decode(&any.value[..]).unwrap()
                        }
                        Some(Result::Error(status)) => v2::ExecuteResponse {
                            status: Some(status),
                            ..Default::default()
                        },
                        None => panic!("a finished operation without a result"),
                    };
                }
            }
            panic!("the operation stream ended before the operation did");
        })
    }

    /// Cancels the operation `name`.
    pub fn cancel(&self, name: &str) {
        use wasm9p_remote::apis::longrunning::operations_client::OperationsClient;
        use wasm9p_remote::apis::longrunning::CancelOperationRequest;
        self.runtime.block_on(async {
            let mut client = OperationsClient::new(self.channel.clone());
            client
                .cancel_operation(CancelOperationRequest { name: name.into() })
                .await
                .unwrap();
        });
    }
}

/// The tests' guest (`guests/farm_action.c`).
pub fn guest() -> Bytes {
    let path = wasm9p_tests::compile_c_guest(&wasm9p_tests::guest_source("farm_action.c"));
    Bytes::from(std::fs::read(path).unwrap())
}

/// The stdout of an action's result, inline or from the CAS.
pub fn stdout_of(client: &Client, response: &v2::ExecuteResponse) -> String {
    let result = response.result.as_ref().expect("a result");
    match &result.stdout_digest {
        Some(d) if d.size_bytes > 0 => String::from_utf8_lossy(&client.blob(d)).into_owned(),
        _ => String::from_utf8_lossy(&result.stdout_raw).into_owned(),
    }
}
