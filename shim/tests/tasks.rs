//! `containerd-shim-wasm9p-v1` under Debian's containerd, driven by `ctr` as a user
//! drives it: cli guests (output, exit code, the rootfs read and written, a read-only
//! root, volumes), http components (rootfs files, the env's address, SIGTERM under
//! load), the memory limit, signals, compiled code kept across containers, a
//! node-side 9P server shared by two containers, and every bad input failing the
//! create with one line.

mod containerd;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use containerd::{containerd, rootfs, text};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// The test guest (`tests/guests/task.c`), a preview1 module, built once.
fn task_module() -> &'static [u8] {
    static CELL: OnceLock<Vec<u8>> = OnceLock::new();
    CELL.get_or_init(|| {
        let module = wasm9p_tests::compile_c_guest(&repo("shim/tests/guests/task.c"));
        std::fs::read(module).unwrap()
    })
}

/// The same guest as a `wasi:cli` component.
fn task_component() -> &'static [u8] {
    static CELL: OnceLock<Vec<u8>> = OnceLock::new();
    CELL.get_or_init(|| {
        let module = wasm9p_tests::compile_c_guest(&repo("shim/tests/guests/task.c"));
        std::fs::read(wasm9p_tests::componentize(&module)).unwrap()
    })
}

/// A `wasi:http` component serving the namespace's files (`examples/http/static.c`).
fn static_component() -> &'static [u8] {
    static CELL: OnceLock<Vec<u8>> = OnceLock::new();
    CELL.get_or_init(|| {
        std::fs::read(wasm9p_tests::c_http(&repo("examples/http/static.c"))).unwrap()
    })
}

/// A `wasi:http` component that sleeps or grows on request
/// (`tests/guests/http_limits.c`).
fn limits_component() -> &'static [u8] {
    static CELL: OnceLock<Vec<u8>> = OnceLock::new();
    CELL.get_or_init(|| {
        std::fs::read(wasm9p_tests::c_http(&repo("tests/guests/http_limits.c"))).unwrap()
    })
}

/// Runs `args` (argv[0] the wasm file) in a container on `root` with `options`: the
/// exit code, stdout, stderr.
fn run(ns: &str, options: &[&str], root: &Path, id: &str, args: &[&str]) -> (i32, String, String) {
    let root = root.display().to_string();
    let mut all = vec!["--rootfs"];
    all.extend_from_slice(options);
    let output = containerd().run(ns, &all, &root, id, args);
    let (out, err) = text(&output);
    (output.status.code().unwrap_or(-1), out, err)
}

#[test]
fn a_cli_guest_prints_exits_with_its_code_and_reads_and_writes_its_rootfs() {
    // WASI 0.2's exit says only success or failure: a component's exit(7) is 1.
    for (kind, wasm, exit) in [
        ("module", task_module(), 7),
        ("component", task_component(), 1),
    ] {
        let root = rootfs(&[
            ("/task.wasm", wasm),
            ("/etc/greeting", b"hello from the rootfs\n"),
            ("/work/.keep", b""),
        ]);
        let args = [
            "/task.wasm",
            "cat",
            "/etc/greeting",
            "--",
            "write",
            "/work/made.txt",
            "made here",
            "--",
            "env",
            "GREETING",
            "--",
            "ls",
            "/proc",
            "--",
            "exit",
            "7",
        ];
        let (code, out, err) = run(
            "cli",
            &["--env", "GREETING=hi"],
            root.path(),
            &format!("cli-{kind}"),
            &args,
        );
        assert_eq!(code, exit, "{kind}: {out}{err}");
        assert_eq!(
            out, "hello from the rootfs\nwrote /work/made.txt\nGREETING=hi\nls /proc:\n",
            "{kind}: the guest's output, /proc hidden; stderr: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(root.path().join("work/made.txt")).unwrap(),
            "made here",
            "{kind}: the file the guest made is in the rootfs"
        );
        if kind == "module" {
            // A working directory other than / is not applied, and the task says so.
            let (code, out, err) = run(
                "cli",
                &["--cwd", "/work"],
                root.path(),
                "cli-cwd",
                &["/task.wasm", "cwd"],
            );
            assert_eq!((code, out.as_str()), (0, "cwd /\n"), "{err}");
            assert_eq!(
                err,
                "wasm9p: the working directory /work is not applied: a WASI guest starts in / \
                 (give paths from /)\n"
            );
        }

        // The same on a read-only root: the read works, the create is refused.
        std::fs::remove_file(root.path().join("work/made.txt")).unwrap();
        let (code, out, err) = run(
            "cli",
            &["--read-only"],
            root.path(),
            &format!("cli-ro-{kind}"),
            &[
                "/task.wasm",
                "cat",
                "/etc/greeting",
                "--",
                "write",
                "/work/made.txt",
                "x",
            ],
        );
        assert_eq!(code, 1, "{kind}: {out}{err}");
        assert_eq!(
            out, "hello from the rootfs\nwrite /work/made.txt: Read-only file system\n",
            "{kind}: {err}"
        );
        assert!(!root.path().join("work/made.txt").exists());
    }
}

#[test]
fn volumes_appear_at_their_destinations_with_ro_honoured() {
    let root = rootfs(&[
        ("/task.wasm", task_module()),
        ("/data/.keep", b""),
        ("/scratch/.keep", b""),
    ]);
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("config.txt"), "from a volume\n").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let ro = format!(
        "type=bind,src={},dst=/data,options=rbind:ro",
        data.path().display()
    );
    let rw = format!(
        "type=bind,src={},dst=/scratch,options=rbind:rw",
        scratch.path().display()
    );
    let (code, out, err) = run(
        "volumes",
        &["--mount", &ro, "--mount", &rw],
        root.path(),
        "volumes",
        &[
            "/task.wasm",
            "cat",
            "/data/config.txt",
            "--",
            "write",
            "/scratch/out.txt",
            "kept",
            "--",
            "write",
            "/data/new.txt",
            "refused",
        ],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(
        out, "from a volume\nwrote /scratch/out.txt\nwrite /data/new.txt: Read-only file system\n",
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(scratch.path().join("out.txt")).unwrap(),
        "kept"
    );
    assert!(!data.path().join("new.txt").exists());
}

/// A free port on 127.0.0.1.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 GET on a connection of its own: the status and the body.
fn get(port: u16, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no head in {} bytes", response.len())))?;
    let head = String::from_utf8_lossy(&response[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad head {head:?}")))?;
    let mut body = response[head_end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = unchunk(&body);
    }
    Ok((status, body))
}

fn unchunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&body[..line_end]).trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[line_end + 2..line_end + 2 + size]);
        body = &body[line_end + 2 + size + 2..];
    }
}

/// A task running under `ctr run --rm` (not detached: ctr ends with the task's exit
/// code), listening on `port` when it serves.
struct Running {
    ns: &'static str,
    id: String,
    port: u16,
    ctr: Option<std::process::Child>,
    /// Where ctr's stdout and stderr go (the task's, and ctr's own words).
    output: tempfile::NamedTempFile,
}

impl Running {
    /// Starts `args` on the directory `root`.
    fn spawn(
        ns: &'static str,
        id: &str,
        root: &Path,
        options: &[&str],
        args: &[&str],
        port: u16,
    ) -> Running {
        let mut all = vec!["--rootfs"];
        all.extend_from_slice(options);
        Running::spawn_image(ns, id, &root.display().to_string(), &all, args, port)
    }

    /// Starts `args` on `image` (or what `options` make of it: `--rootfs`).
    fn spawn_image(
        ns: &'static str,
        id: &str,
        image: &str,
        options: &[&str],
        args: &[&str],
        port: u16,
    ) -> Running {
        let mut ctr = containerd().ctr_run(ns);
        ctr.args(options)
            .arg(image)
            .arg(id)
            .args(args)
            .stdin(std::process::Stdio::null());
        let output = tempfile::NamedTempFile::new().unwrap();
        ctr.stdout(output.reopen().unwrap())
            .stderr(output.reopen().unwrap());
        Running {
            ns,
            id: id.to_owned(),
            port,
            ctr: Some(ctr.spawn().unwrap()),
            output,
        }
    }

    /// What ctr and the task printed so far.
    fn printed(&self) -> String {
        std::fs::read_to_string(self.output.path()).unwrap_or_default()
    }

    /// Serves `wasm` on a free port of 127.0.0.1, the address given as runwasi's
    /// wasmtime shim takes it; returns once it listens.
    fn start(ns: &'static str, id: &str, root: &Path, wasm: &str, extra: &[&str]) -> Running {
        let port = free_port();
        let listen = format!("WASMTIME_HTTP_PROXY_SOCKET_ADDR=127.0.0.1:{port}");
        let mut options = vec!["--net-host", "--env", &listen];
        options.extend_from_slice(extra);
        let mut served = Running::spawn(ns, id, root, &options, &[wasm], port);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = served.ctr.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{id} ended ({status}): {}; {:?}",
                    served.printed(),
                    containerd().log_of(id)
                );
            }
            assert!(
                Instant::now() < deadline,
                "{id} did not listen on {port}: {:?}",
                containerd().log_of(id)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        served
    }

    /// Waits until containerd says the task runs.
    fn wait_running(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let tasks = containerd()
                .ctr(self.ns)
                .args(["task", "ls"])
                .output()
                .unwrap();
            let list = text(&tasks).0;
            if list
                .lines()
                .any(|l| l.starts_with(&format!("{} ", self.id)) && l.contains("RUNNING"))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} is not running: {list}; ctr: {}",
                self.id,
                self.printed()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `ctr task kill -s SIGNAL`, then the task's exit code (ctr's).
    fn stop(&mut self, signal: &str) -> i32 {
        let kill = containerd()
            .ctr(self.ns)
            .args(["task", "kill", "-s", signal, &self.id])
            .output()
            .unwrap();
        assert!(kill.status.success(), "{:?}", text(&kill));
        let mut child = self.ctr.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "{} did not end after {signal}",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.ctr.take() {
            let _ = containerd()
                .ctr(self.ns)
                .args(["task", "kill", "-s", "SIGKILL", &self.id])
                .output();
            let _ = child.wait();
        }
    }
}

#[test]
fn an_http_component_serves_its_rootfs_on_the_envs_address_and_drains_on_sigterm() {
    let big: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
    let root = rootfs(&[
        ("/static.wasm", static_component()),
        ("/site/index.html", b"<p>served over 9P</p>\n"),
        ("/site/big.bin", &big),
    ]);
    let served = Running::start("http", "http-static", root.path(), "/static.wasm", &[]);
    assert_eq!(
        get(served.port, "/site/index.html").unwrap(),
        (200, b"<p>served over 9P</p>\n".to_vec())
    );
    let (status, body) = get(served.port, "/site/big.bin").unwrap();
    assert_eq!((status, body.len()), (200, big.len()));
    assert!(body == big, "the 64 KiB file's bytes");
    assert_eq!(get(served.port, "/site/missing.html").unwrap().0, 404);
    // The guest's namespace has no /proc: nothing of the shim's process is served.
    assert_eq!(get(served.port, "/proc/self/environ").unwrap().0, 404);

    // SIGTERM with requests in flight: each is answered, then the task ends with 0.
    let root = rootfs(&[("/limits.wasm", limits_component())]);
    let mut served = Running::start("http", "http-drain", root.path(), "/limits.wasm", &[]);
    let port = served.port;
    let in_flight: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || get(port, "/sleep?1500")))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let code = served.stop("SIGTERM");
    for request in in_flight {
        let (status, body) = request
            .join()
            .unwrap()
            .expect("an accepted request is answered");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    assert_eq!(
        code,
        0,
        "the server ended with 0: {:?}",
        containerd().log_of("http-drain")
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens after"
    );
}

#[test]
fn the_specs_memory_limit_bounds_the_guest_with_a_typed_stop() {
    let root = rootfs(&[("/task.wasm", task_module())]);
    let limit = (96u64 << 20).to_string();
    let (code, out, err) = run(
        "memory",
        &["--memory-limit", &limit],
        root.path(),
        "memory-small",
        &["/task.wasm", "alloc", "8"],
    );
    assert_eq!(
        (code, out.as_str()),
        (0, "allocated 8 MiB (2048 pages)\n"),
        "{err}"
    );
    let (code, out, err) = run(
        "memory",
        &["--memory-limit", &limit],
        root.path(),
        "memory-large",
        &["/task.wasm", "alloc", "400"],
    );
    assert_eq!(code, 1, "{out}{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("wasm9p: /task.wasm: memory limit"),
        "one line saying why: {err:?}"
    );

    // An http request past it gets a 500, and the server goes on.
    let root = rootfs(&[("/limits.wasm", limits_component())]);
    let served = Running::start(
        "memory",
        "memory-http",
        root.path(),
        "/limits.wasm",
        &["--memory-limit", &limit],
    );
    let (status, body) = get(served.port, "/grow").unwrap();
    assert_eq!(status, 500, "{}", String::from_utf8_lossy(&body));
    assert!(
        String::from_utf8_lossy(&body).starts_with("memory limit"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(get(served.port, "/ok").unwrap(), (200, b"ok\n".to_vec()));
}

/// The pids of the shim processes serving container `id`.
fn shim_pids(id: &str) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", &format!("containerd-shim-wasm9p-v1 .*-id {id}( |$)")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether any mount in containerd's namespace names `id`.
fn mounted(id: &str) -> bool {
    containerd().mounts().lines().any(|l| l.contains(id))
}

#[test]
fn signals_stop_tasks_and_a_killed_shim_leaves_containerd_going() {
    // From an image, so that containerd mounts each container's rootfs (and must
    // unmount it).
    let image = "docker.io/wasm9p/task:signals";
    containerd().import(
        "signals",
        image,
        &["/task.wasm"],
        &[("/task.wasm", task_module())],
    );
    let sleeping = ["/task.wasm", "sleep", "600"];
    for (signal, code) in [("SIGTERM", 143), ("SIGKILL", 137)] {
        let id = format!("signal-{}", signal.to_lowercase());
        let mut task = Running::spawn_image("signals", &id, image, &[], &sleeping, 0);
        task.wait_running();
        assert!(
            mounted(&id),
            "{signal}: its rootfs is mounted while it runs"
        );
        let started = Instant::now();
        assert_eq!(task.stop(signal), code, "{signal}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{signal} stopped it at once"
        );
        assert!(!mounted(&id), "{signal}: nothing stays mounted");
    }

    // The shim itself killed: its task is gone, containerd says so and goes on.
    let mut task = Running::spawn_image("signals", "shim-killed", image, &[], &sleeping, 0);
    task.wait_running();
    let pids = shim_pids("shim-killed");
    assert!(!pids.is_empty(), "the shim's process");
    for pid in &pids {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let mut ctr = task.ctr.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = ctr.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "ctr run did not end with its shim"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "the task did not end well: {status}");
    let ctr = || containerd().ctr("signals");
    let _ = ctr().args(["task", "delete", "-f", "shim-killed"]).output();
    let _ = ctr().args(["container", "delete", "shim-killed"]).output();
    assert!(!mounted("shim-killed"), "nothing stays mounted");
    let output = containerd().run(
        "signals",
        &[],
        image,
        "after-kill",
        &["/task.wasm", "exit", "0"],
    );
    assert!(
        output.status.success(),
        "containerd goes on: {:?}",
        text(&output)
    );
}

#[test]
fn the_second_container_of_an_image_does_not_compile() {
    let name = "docker.io/wasm9p/task:compiled";
    // A module of its own (a custom section makes its digest unique): no other test
    // has compiled it into the shared module cache.
    let module = with_custom_section(task_module(), "compiled-once");
    containerd().import(
        "images",
        name,
        &["/task.wasm"],
        &[
            ("/task.wasm", &module),
            ("/etc/greeting", b"from the image\n"),
        ],
    );
    let mut compiles = Vec::new();
    for id in ["image-first", "image-second"] {
        let output = containerd().run(
            "images",
            &[],
            name,
            id,
            &["/task.wasm", "cat", "/etc/greeting"],
        );
        let (out, err) = text(&output);
        assert!(output.status.success(), "{id}: {out}{err}");
        assert_eq!(out, "from the image\n");
        compiles.push(
            containerd()
                .log_of(id)
                .iter()
                .filter(|line| line.contains("wasm9p: compiling"))
                .count(),
        );
    }
    assert_eq!(
        compiles,
        [1, 0],
        "the first compiles, the second maps the cached code"
    );
}

#[test]
fn a_node_side_server_is_shared_by_two_containers_and_its_changes_are_seen() {
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("page.txt"), "first version\n").unwrap();
    let socket = containerd().node_dir.join("site.sock");
    let server = wasm9p_tests::TestServer::start(
        wasm9p_server::ServerConfig {
            exports: vec![wasm9p_server::ExportConfig::new(site.path())],
            ..Default::default()
        },
        &format!("unix:{}", socket.display()),
    );
    let annotation = format!(
        "wasm9p.io/mounts=type=9p,source=unix:{},target=/data,cache=loose,revalidate=200",
        socket.display()
    );
    let root = rootfs(&[("/static.wasm", static_component())]);
    let a = Running::start(
        "node",
        "node-a",
        root.path(),
        "/static.wasm",
        &["--annotation", &annotation],
    );
    let b = Running::start(
        "node",
        "node-b",
        root.path(),
        "/static.wasm",
        &["--annotation", &annotation],
    );
    for served in [&a, &b] {
        assert_eq!(
            get(served.port, "/data/page.txt").unwrap(),
            (200, b"first version\n".to_vec())
        );
    }
    // Both containers' mounts are sessions of the one server, each holding its
    // attach's fid at least.
    assert!(
        server.server.live_fids() >= 2,
        "{}",
        server.server.live_fids()
    );
    std::fs::write(site.path().join("page.txt"), "second version\n").unwrap();
    let changed = Instant::now();
    for served in [&a, &b] {
        loop {
            let (_, body) = get(served.port, "/data/page.txt").unwrap();
            if body == b"second version\n" {
                break;
            }
            assert!(
                changed.elapsed() < Duration::from_secs(5),
                "{}: the change was not seen within revalidate",
                served.id
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A preview1 module past [`containerd::TIER_FROM`]: `functions` functions of
/// arithmetic, chained into one number `_start` prints.
fn big_module(functions: u32) -> Vec<u8> {
    let mut wat = String::from(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
"#,
    );
    for f in 0..functions {
        wat.push_str(&format!(
            "  (func $f{f} (param i32) (result i32)\n    local.get 0\n"
        ));
        for step in 0..40u32 {
            let k = f.wrapping_mul(2_654_435_761).wrapping_add(step * 97) | 1;
            wat.push_str(&format!(
                "    i32.const {k} i32.mul i32.const {} i32.rotl i32.const {step} i32.xor\n",
                (step % 31) + 1
            ));
        }
        wat.push_str("  )\n");
    }
    // _start: the chain's low byte as one letter and a newline.
    wat.push_str("  (func (export \"_start\") (local $v i32)\n    i32.const 7 local.set $v\n");
    for f in 0..functions {
        wat.push_str(&format!("    local.get $v call $f{f} local.set $v\n"));
    }
    wat.push_str(
        r#"    i32.const 16 local.get $v i32.const 25 i32.rem_u i32.const 97 i32.add i32.store8
    i32.const 17 i32.const 10 i32.store8
    i32.const 0 i32.const 16 i32.store
    i32.const 4 i32.const 2 i32.store
    i32.const 1 i32.const 0 i32.const 1 i32.const 8 call $fd_write drop)
)"#,
    );
    wat::parse_str(&wat).unwrap()
}

#[test]
fn a_big_programs_optimized_code_is_finished_on_the_node_for_the_next_container() {
    let module = big_module(2500);
    assert!(
        module.len() as u64 > containerd::TIER_FROM,
        "{} bytes",
        module.len()
    );
    let root = rootfs(&[("/big.wasm", &module)]);
    // The first container compiles the baseline code, starts the optimized compile,
    // and ends first: the node finishes it.
    let (code, first_out, err) = run("tiers", &[], root.path(), "tier-0", &["/big.wasm"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(first_out.len(), 2, "{first_out:?}");
    let ended = |id: &str| {
        containerd()
            .log_of(id)
            .iter()
            .find_map(|line| line.contains("ended with 0 on the").then(|| line.clone()))
            .unwrap_or_default()
    };
    let log = containerd().log_of("tier-0");
    assert!(ended("tier-0").contains("on the baseline tier"), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.contains("being compiled in the background for later runs")),
        "the unfinished compile was handed to the node: {log:?}"
    );
    // Later containers run on the optimized code once the node has kept it, and none
    // compiles anything (their first tier is cached, the optimized one is the node's).
    let deadline = Instant::now() + Duration::from_secs(120);
    for n in 1.. {
        let id = format!("tier-{n}");
        let (code, out, err) = run("tiers", &[], root.path(), &id, &["/big.wasm"]);
        assert_eq!((code, &out), (0, &first_out), "{id}: {err}");
        assert!(
            !containerd()
                .log_of(&id)
                .iter()
                .any(|l| l.contains("wasm9p: compiling")),
            "{id} compiled"
        );
        if ended(&id).contains("on the optimized tier") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no container ran on the optimized code"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `wasm` with a custom section named `name` appended: another module to the cache,
/// the same program.
fn with_custom_section(wasm: &[u8], name: &str) -> Vec<u8> {
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    out.push(section.len() as u8);
    out.extend_from_slice(&section);
    out
}

/// `ctr run` of a task that must not start: its stderr, and ctr's exit code.
fn refused(id: &str, options: &[&str], root: &Path, args: &[&str]) -> String {
    let (code, out, err) = run("bad", options, root, id, args);
    assert_ne!(code, 0, "{id}: started: {out}{err}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !shim_pids(id).is_empty() {
        assert!(Instant::now() < deadline, "{id}: the shim did not exit");
        std::thread::sleep(Duration::from_millis(100));
    }
    format!("{out}{err}")
}

#[test]
fn bad_input_fails_the_create_with_one_line_and_the_shim_exits() {
    let neither = wat::parse_str(
        r#"(component
            (core module $m (func (export "f")))
            (core instance $i (instantiate $m))
            (func $f (canon lift (core func $i "f")))
            (export "example:thing/run" (func $f)))"#,
    )
    .unwrap();
    let root = rootfs(&[
        ("/task.wasm", task_module()),
        ("/page.html", b"<p>not wasm</p>\n"),
        ("/neither.wasm", &neither),
    ]);
    let nobody = containerd().node_dir.join("nobody.sock");
    let cases: Vec<(&str, Vec<String>, &str, &str)> = vec![
        (
            "bad-missing",
            vec![],
            "/missing.wasm",
            "the entrypoint /missing.wasm is not in the container's rootfs",
        ),
        (
            "bad-not-wasm",
            vec![],
            "/page.html",
            "/page.html: not a wasm module or component",
        ),
        (
            "bad-neither",
            vec![],
            "/neither.wasm",
            "a component that exports neither wasi:cli/run",
        ),
        (
            "bad-annotation",
            vec![
                "--annotation".into(),
                "wasm9p.io/mounts=type=9p,source=unix:/x,target=/d,colour=blue".into(),
            ],
            "/task.wasm",
            "annotation wasm9p.io/mounts: bad mount",
        ),
        (
            "bad-refused",
            vec![
                "--annotation".into(),
                format!(
                    "wasm9p.io/mounts=type=9p,source=unix:{},target=/d",
                    nobody.display()
                ),
            ],
            "/task.wasm",
            "cannot connect to unix:",
        ),
    ];
    for (id, options, entrypoint, needle) in cases {
        let options: Vec<&str> = options.iter().map(String::as_str).collect();
        let said = refused(id, &options, root.path(), &[entrypoint]);
        let ours: Vec<&str> = said.lines().filter(|l| l.starts_with("wasm9p: ")).collect();
        assert!(
            ours.len() == 1 && ours[0].contains(needle),
            "{id}: one line saying {needle:?}: {said}"
        );
    }
    // And the runtime goes on.
    let (code, _, err) = run(
        "bad",
        &[],
        root.path(),
        "bad-after",
        &["/task.wasm", "exit", "0"],
    );
    assert_eq!(code, 0, "{err}");
}
