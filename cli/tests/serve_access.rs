//! `wasm9p serve --allow`: exports bound to their peers, over real sockets to the real
//! binary. Two tenants' exports: each peer attaches its own, and nothing of the other
//! by any aname (its name, its path, a directory inside it, `..`), while a refused
//! attach leaves the connection free to attach what it may.

use std::path::Path;
use std::process::Command;

use wasm9p_proto::{Addr, Errno};
use wasm9p_tests::{compile_c_guest, spawn_serve, Conn, Reaped, Tree};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

struct Tenants {
    a: tempfile::TempDir,
    b: tempfile::TempDir,
}

fn tenants() -> Tenants {
    Tenants {
        a: Tree::build(&[Tree::file("a.txt", "tenant a\n")]),
        b: Tree::build(&[
            Tree::file("b.txt", "tenant b\n"),
            Tree::Dir("sub", vec![Tree::file("deep.txt", "b's deep\n")]),
        ]),
    }
}

/// `wasm9p serve` arguments exporting both tenants, then `rest`.
fn with_both_exports(t: &Tenants, rest: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--export".to_string(),
        t.a.path().display().to_string(),
        "--export".to_string(),
        t.b.path().display().to_string(),
    ];
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

/// Each tenant's export bound by a `listen:` rule to a Unix listener of its own in
/// `work` (the hybrid-vsock shape).
struct Listeners {
    la: String,
    lb: String,
    /// The exports' names.
    a: String,
    b: String,
    /// `wasm9p serve` arguments for all that, then the `rest` given.
    args: Vec<String>,
}

fn each_on_its_listener(t: &Tenants, work: &Path, rest: &[&str]) -> Listeners {
    let (la, lb) = (
        format!("unix:{}", work.join("a").display()),
        format!("unix:{}", work.join("b").display()),
    );
    let (a, b) = (name(t.a.path()), name(t.b.path()));
    let (allow_a, allow_b) = (format!("{a}=listen:{la}"), format!("{b}=listen:{lb}"));
    let mut flags = vec!["--listen", &la, "--listen", &lb];
    flags.extend(["--allow", &allow_a, "--allow", &allow_b]);
    flags.extend(rest);
    let args = with_both_exports(t, &flags);
    Listeners { la, lb, a, b, args }
}

fn name(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

fn serve(args: &[String]) -> Reaped {
    spawn_serve(BIN, args).0
}

/// Every way an aname might name tenant b's files from tenant a's side.
fn anames_of_b(t: &Tenants) -> Vec<String> {
    let (a, b) = (name(t.a.path()), name(t.b.path()));
    vec![
        b.clone(),
        t.b.path().display().to_string(),
        format!("{b}/sub"),
        format!("{}/sub", t.b.path().display()),
        format!("{a}/../{b}"),
        format!("{}/../{b}", t.a.path().display()),
    ]
}

/// On `conn`, attaching tenant b by any aname fails; tenant a's own export is
/// attachable on the same connection afterwards, and `..` from its root stays in it.
async fn only_a_reachable(conn: &mut Conn, t: &Tenants) {
    for (i, aname) in anames_of_b(t).iter().enumerate() {
        let got = conn.attach(10 + i as u32, aname).await;
        assert!(got.is_err(), "{aname} was attached");
    }
    assert_eq!(
        conn.attach(1, &name(t.b.path())).await,
        Err(Errno::EACCES),
        "a refusal says EACCES"
    );
    let root = conn.attach(0, &name(t.a.path())).await.unwrap();
    assert_eq!(conn.cat(5, "a.txt").await.unwrap(), b"tenant a\n");
    let up = conn.walk(0, 3, "..").await.unwrap();
    assert_eq!(up.last(), Some(&root), "`..` at the root stays there");
    // `../b.txt` from a's root is a's own (missing) b.txt: the walk stops short.
    let walked = conn.walk(0, 6, "../b.txt").await;
    assert!(walked.as_ref().is_ok_and(|q| q.len() < 2), "{walked:?}");
}

#[tokio::test]
async fn exports_bound_to_listeners_are_reached_only_through_them() {
    // The hybrid-vsock shape: a VMM gives each VM its own socket; a `listen:` rule binds
    // the socket to the VM's export.
    let t = tenants();
    let sockets = tempfile::tempdir().unwrap();
    let (sa, sb) = (
        format!("unix:{}", sockets.path().join("a.sock").display()),
        format!("unix:{}", sockets.path().join("b.sock").display()),
    );
    let args = with_both_exports(
        &t,
        &[
            "--listen",
            &sa,
            "--listen",
            &sb,
            "--allow",
            &format!("{}=listen:{sa}", name(t.a.path())),
            "--allow",
            &format!("{}=listen:{sb}", t.b.path().display()),
        ],
    );
    let _server = serve(&args);
    let mut conn = Conn::connect(&sa.parse::<Addr>().unwrap()).await;
    conn.version(65536).await;
    only_a_reachable(&mut conn, &t).await;

    // Through b's socket, b's export (and a directory inside it) and nothing of a's.
    let mut conn = Conn::connect(&sb.parse::<Addr>().unwrap()).await;
    conn.version(65536).await;
    conn.attach(0, &format!("{}/sub", name(t.b.path())))
        .await
        .unwrap();
    assert_eq!(conn.cat(5, "deep.txt").await.unwrap(), b"b's deep\n");
    assert_eq!(conn.attach(2, &name(t.a.path())).await, Err(Errno::EACCES));
    assert_eq!(
        conn.attach(3, t.a.path().to_str().unwrap()).await,
        Err(Errno::EACCES)
    );
}

#[tokio::test]
async fn ip_rules_tell_loopback_v4_from_v6() {
    let t = tenants();
    let free = |host: &str| {
        let l = std::net::TcpListener::bind((host, 0)).ok()?;
        Some(l.local_addr().ok()?.port())
    };
    let v4 = format!("tcp:127.0.0.1:{}", free("127.0.0.1").unwrap());
    let v6 = free("::1").map(|port| format!("tcp:[::1]:{port}"));
    let mut args = with_both_exports(
        &t,
        &[
            "--listen",
            &v4,
            "--allow",
            &format!("{}=ip:127.0.0.0/8", name(t.a.path())),
            "--allow",
            &format!("{}=ip:::1", name(t.b.path())),
        ],
    );
    match &v6 {
        Some(addr) => args.extend(["--listen".into(), addr.clone()]),
        None => eprintln!("no ::1 on this machine: only the IPv4 side is checked"),
    }
    let _server = serve(&args);
    let mut conn = Conn::connect(&v4.parse::<Addr>().unwrap()).await;
    conn.version(65536).await;
    only_a_reachable(&mut conn, &t).await;
    if let Some(v6) = v6 {
        let mut conn = Conn::connect(&v6.parse::<Addr>().unwrap()).await;
        conn.version(65536).await;
        conn.attach(0, &name(t.b.path())).await.unwrap();
        assert_eq!(conn.cat(5, "b.txt").await.unwrap(), b"tenant b\n");
        assert_eq!(conn.attach(2, &name(t.a.path())).await, Err(Errno::EACCES));
    }
}

#[test]
fn uid_rules_decide_by_the_unix_peers_credentials() {
    let t = tenants();
    let sockets = tempfile::tempdir().unwrap();
    let sock = sockets.path().join("9p.sock");
    let listen = format!("unix:{}", sock.display());
    let args = with_both_exports(
        &t,
        &[
            "--listen",
            &listen,
            "--allow",
            &format!("{}=uid:0", name(t.a.path())),
            "--allow",
            &format!("{}=uid:65534", name(t.b.path())),
        ],
    );
    let _server = serve(&args);
    let me = rustix::process::geteuid().as_raw();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut conn = Conn::connect(&listen.parse::<Addr>().unwrap()).await;
        conn.version(65536).await;
        let (mine, other) = match me {
            0 => (name(t.a.path()), name(t.b.path())),
            _ => (String::new(), name(t.b.path())),
        };
        assert_eq!(conn.attach(1, &other).await, Err(Errno::EACCES));
        if !mine.is_empty() {
            conn.attach(2, &mine).await.unwrap();
        } else {
            // Neither rule names this user: nothing at all.
            assert_eq!(conn.attach(2, &name(t.a.path())).await, Err(Errno::EACCES));
        }
    });
    if me != 0 {
        eprintln!("as another user: not checked (acting as nobody needs root)");
        return;
    }
    // A real client as nobody: `wasm9p run` with a 9p mount of each export.
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let open = |p: &Path, mode| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
    let work = tempfile::tempdir().unwrap();
    open(work.path(), 0o755).unwrap();
    open(sockets.path(), 0o755).unwrap();
    open(&sock, 0o777).unwrap();
    let client = work.path().join("wasm9p");
    std::fs::copy(BIN, &client).unwrap();
    let guest = work.path().join("guest.wasm");
    std::fs::copy(
        compile_c_guest(&wasm9p_tests::guest_source("header_search.c")),
        &guest,
    )
    .unwrap();
    for p in [&client, &guest] {
        open(p, 0o755).unwrap();
    }
    for dir in [t.a.path(), t.b.path()] {
        open(dir, 0o755).unwrap();
    }
    let as_nobody = |aname: &str, file: &str| {
        Command::new(&client)
            .current_dir(work.path())
            .env_clear()
            .args([
                "run",
                "--no-module-cache",
                "--mount",
                &format!(
                    "type=9p,{},aname={aname},target=/t",
                    format_args!("source={listen}")
                ),
            ])
            .arg(&guest)
            .args(["/t", "--", file])
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    };
    let out = as_nobody(&name(t.b.path()), "b.txt");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("b.txt: /t/b.txt 9 bytes"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_nobody(&name(t.a.path()), "a.txt");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
}

#[test]
fn a_rule_for_no_export_and_a_malformed_rule_are_refused_at_start() {
    let t = tenants();
    for (rule, needle) in [
        ("nosuch=uid:0".to_string(), "no such export"),
        (format!("{}=uid:me", name(t.a.path())), "expected a number"),
        (name(t.a.path()), "EXPORT=PEER"),
    ] {
        let out = Command::new(BIN)
            .args(["serve", "--export", t.a.path().to_str().unwrap()])
            .args(["--listen", "tcp:127.0.0.1:0", "--allow", &rule])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{rule}: {stderr}");
        assert!(stderr.contains(needle), "{rule}: {stderr}");
    }
}

#[test]
fn a_bound_of_no_tenant_threads_is_refused_at_start() {
    let t = tenants();
    let out = Command::new(BIN)
        .args(["serve", "--export", t.a.path().to_str().unwrap()])
        .args(["--listen", "tcp:127.0.0.1:0", "--max-tenant-threads", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--max-tenant-threads"), "{stderr}");
}

#[tokio::test]
async fn an_export_marked_ro_refuses_changes_and_its_neighbour_does_not() {
    let t = tenants();
    let sockets = tempfile::tempdir().unwrap();
    let listen = format!("unix:{}", sockets.path().join("s").display());
    let args: Vec<String> = [
        "--export".to_string(),
        format!("{},ro", t.a.path().display()),
        "--export".to_string(),
        t.b.path().display().to_string(),
        "--listen".to_string(),
        listen.clone(),
    ]
    .to_vec();
    let _server = serve(&args);
    let mut conn = Conn::connect(&listen.parse::<Addr>().unwrap()).await;
    conn.version(65536).await;
    conn.attach(1, &name(t.a.path())).await.unwrap();
    conn.attach(2, &name(t.b.path())).await.unwrap();
    let mkdir = |fid| wasm9p_proto::Tmkdir {
        dfid: fid,
        name: "new".into(),
        mode: 0o755,
        gid: 0,
    };
    assert_eq!(conn.rpc(mkdir(1)).await.err(), Some(Errno::EROFS));
    conn.rpc(mkdir(2)).await.unwrap();
    assert!(t.b.path().join("new").is_dir() && !t.a.path().join("new").exists());
}

fn hangup(server: &Reaped) {
    let status = Command::new("kill")
        .args(["-HUP", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn rules_read_again_on_sighup_keep_connections_and_take_away_only_what_they_revoke() {
    let t = tenants();
    let work = tempfile::tempdir().unwrap();
    let listen = format!("unix:{}", work.path().join("s").display());
    let rules = work.path().join("rules");
    let (a, b) = (name(t.a.path()), name(t.b.path()));
    std::fs::write(&rules, format!("# tenant a only\n{a}=listen:{listen}\n")).unwrap();
    let args = with_both_exports(
        &t,
        &["--listen", &listen, "--allow-file", rules.to_str().unwrap()],
    );
    let server = serve(&args);
    let addr: Addr = listen.parse().unwrap();
    let mut conn = Conn::connect(&addr).await;
    conn.version(65536).await;
    conn.attach(0, &a).await.unwrap();
    assert_eq!(conn.cat(5, "a.txt").await.unwrap(), b"tenant a\n");
    assert_eq!(conn.attach(1, &b).await, Err(Errno::EACCES));

    // Now b, not a.
    std::fs::write(&rules, format!("{b}=listen:{listen}\n")).unwrap();
    hangup(&server);
    let deadline = std::time::Instant::now() + wasm9p_tests::TEST_TIMEOUT;
    loop {
        let mut probe = Conn::connect(&addr).await;
        probe.version(65536).await;
        if probe.attach(0, &b).await.is_ok() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the rules were not reloaded"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The same connection: its fid on a is gone (EACCES once, then a free number)...
    assert_eq!(conn.walk(0, 6, "a.txt").await, Err(Errno::EACCES));
    assert_eq!(conn.walk(0, 6, "a.txt").await, Err(Errno::EBADF));
    assert_eq!(conn.attach(2, &a).await, Err(Errno::EACCES));
    // ...and it may use what it now may.
    conn.attach(0, &b).await.unwrap();
    assert_eq!(conn.cat(5, "b.txt").await.unwrap(), b"tenant b\n");

    // Rules that do not read change nothing.
    std::fs::write(&rules, "this is not a rule\n").unwrap();
    hangup(&server);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(conn.cat(7, "b.txt").await.unwrap(), b"tenant b\n");
    let mut later = Conn::connect(&addr).await;
    later.version(65536).await;
    later.attach(0, &b).await.unwrap();
    assert_eq!(later.attach(1, &a).await, Err(Errno::EACCES));
}

#[tokio::test]
async fn a_peers_connections_and_fids_are_bounded_together_and_others_are_not_held_back() {
    let t = tenants();
    let work = tempfile::tempdir().unwrap();
    let Listeners { la, lb, a, b, args } = each_on_its_listener(
        &t,
        work.path(),
        &[
            "--max-connections-per-peer",
            "2",
            "--max-fids-per-peer",
            "5",
        ],
    );
    let _server = serve(&args);
    let (addr_a, addr_b): (Addr, Addr) = (la.parse().unwrap(), lb.parse().unwrap());
    let mut first = Conn::connect(&addr_a).await;
    first.version(65536).await;
    let mut second = Conn::connect(&addr_a).await;
    second.version(65536).await;
    // A third connection of the same peer is closed at once.
    assert!(
        !answers_version(&la, std::time::Duration::from_secs(5)).await,
        "a third connection was served"
    );
    // Five fids over both connections, then EMFILE on either.
    first.attach(0, &a).await.unwrap();
    second.attach(0, &a).await.unwrap();
    first.walk(0, 1, "").await.unwrap();
    second.walk(0, 1, "").await.unwrap();
    first.walk(0, 2, "").await.unwrap();
    assert_eq!(second.walk(0, 2, "").await, Err(Errno::EMFILE));
    assert_eq!(first.attach(3, &a).await, Err(Errno::EMFILE));
    // The other tenant has its own.
    let mut other = Conn::connect(&addr_b).await;
    other.version(65536).await;
    other.attach(0, &b).await.unwrap();
    for fid in 1..5 {
        other.walk(0, fid, "").await.unwrap();
    }
    // Fids given back are the tenant's again; a connection gone frees its place.
    first.clunk(2).await.unwrap();
    second.walk(0, 2, "").await.unwrap();
    drop(first);
    let deadline = std::time::Instant::now() + wasm9p_tests::TEST_TIMEOUT;
    loop {
        if answers_version(&la, std::time::Duration::from_millis(500)).await {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the closed connection's place stayed taken"
        );
    }
}

/// Whether a new connection to the Unix listener `listen` gets an answer to Tversion
/// within `wait` (a connection the server closes at once may also refuse the write).
async fn answers_version(listen: &str, wait: std::time::Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let path = listen.strip_prefix("unix:").unwrap();
    let Ok(mut stream) = tokio::net::UnixStream::connect(path).await else {
        return false;
    };
    let mut frame = bytes::BytesMut::new();
    let version = wasm9p_proto::Tversion {
        msize: 65536,
        version: "9P2000.L".into(),
    };
    wasm9p_proto::encode_frame(0, &version.into(), &mut frame);
    if stream.write_all(&frame).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(wait, stream.read(&mut buf)).await,
        Ok(Ok(n)) if n > 0
    )
}

#[tokio::test]
async fn a_refusal_is_logged_once_per_peer_and_export_with_the_peer() {
    let t = tenants();
    let work = tempfile::tempdir().unwrap();
    let listen = format!("unix:{}", work.path().join("s").display());
    let log = work.path().join("stderr");
    let args = with_both_exports(
        &t,
        &[
            "--listen",
            &listen,
            "--allow",
            &format!("{}=uid:65534", name(t.a.path())),
        ],
    );
    let child = Command::new(BIN)
        .arg("serve")
        .args(&args)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _server = Reaped::of(child);
    let text = || std::fs::read_to_string(&log).unwrap();
    let deadline = std::time::Instant::now() + wasm9p_tests::TEST_TIMEOUT;
    while !text().contains("serving") {
        assert!(std::time::Instant::now() < deadline, "{}", text());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let addr: Addr = listen.parse().unwrap();
    for _ in 0..2 {
        let mut conn = Conn::connect(&addr).await;
        conn.version(65536).await;
        for fid in 0..3 {
            assert_eq!(
                conn.attach(fid, &name(t.a.path())).await,
                Err(Errno::EACCES)
            );
        }
    }
    // The same peer (this user, on this listener) refused six times: one line, naming it.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let logged = text();
    let refusals: Vec<&str> = logged.lines().filter(|l| l.contains("refused")).collect();
    assert_eq!(refusals.len(), 1, "{logged}");
    let me = rustix::process::geteuid().as_raw();
    assert!(
        refusals[0].contains(&format!("uid {me}")) && refusals[0].contains(&name(t.a.path())),
        "{logged}"
    );
}

#[tokio::test]
async fn a_rate_cap_holds_an_exports_reads_to_its_bytes_a_second() {
    let t = tenants();
    // 3 MiB at 1 MiB/s, of which the bucket's 1 MiB passes at once: at least 2 s.
    let big = vec![7u8; 3 << 20];
    std::fs::write(t.a.path().join("big"), &big).unwrap();
    let sockets = tempfile::tempdir().unwrap();
    let listen = format!("unix:{}", sockets.path().join("s.sock").display());
    let args = with_both_exports(
        &t,
        &[
            "--listen",
            &listen,
            "--rate",
            &format!("{}=1M", name(t.a.path())),
        ],
    );
    let _server = serve(&args);
    let addr: Addr = listen.parse().unwrap();
    let (mut conn, _) = Conn::attached(&addr, 65536, &name(t.a.path())).await;
    conn.walk(0, 1, "big").await.unwrap();
    conn.lopen(1, 0).await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(conn.read_all(1).await.unwrap(), big);
    let took = started.elapsed();
    assert!(
        took.as_secs_f64() >= 1.9,
        "3 MiB through a 1 MiB/s cap in {took:?}"
    );
    // Metadata is never held, and the other export has no cap to wait for.
    let (mut other, _) = Conn::attached(&addr, 65536, &name(t.b.path())).await;
    assert_eq!(other.cat(5, "b.txt").await.unwrap(), b"tenant b\n");
    // A cap for no export, or no rate, stops the server at start.
    for (cap, needle) in [
        ("nosuch=1M".to_string(), "no such export"),
        (format!("{}=fast", name(t.a.path())), "bytes a second"),
        (format!("{}=0", name(t.a.path())), "bytes a second"),
        ("1M".to_string(), "EXPORT=BYTES"),
    ] {
        let out = Command::new(BIN)
            .args(["serve", "--export", t.a.path().to_str().unwrap()])
            .args(["--listen", "tcp:127.0.0.1:0", "--rate", &cap])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cap}: {stderr}");
        assert!(stderr.contains(needle), "{cap}: {stderr}");
    }
}

/// How many of the server's threads are tenants' I/O threads (`ps -L` shows them by
/// this name).
fn tenant_threads(server: &Reaped) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", server.id()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == "wasm9p-tenant")
        .count()
}

/// Waits (bounded) until the server has `n` tenant threads; false if it never does.
async fn tenant_threads_become(server: &Reaped, n: usize) -> bool {
    let deadline = std::time::Instant::now() + wasm9p_tests::TEST_TIMEOUT;
    while tenant_threads(server) != n {
        if std::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    true
}

#[tokio::test]
async fn each_tenant_is_served_on_a_thread_of_its_own_that_ends_with_its_last_connection() {
    let t = tenants();
    let work = tempfile::tempdir().unwrap();
    let Listeners { la, lb, a, b, args } = each_on_its_listener(&t, work.path(), &[]);
    let server = serve(&args);
    let (addr_a, addr_b): (Addr, Addr) = (la.parse().unwrap(), lb.parse().unwrap());
    assert_eq!(tenant_threads(&server), 0, "a thread before any tenant");
    // Two connections of tenant a, one of tenant b: two threads, each serving.
    let mut conns = Vec::new();
    for (addr, export) in [(&addr_a, &a), (&addr_a, &a), (&addr_b, &b)] {
        conns.push(Conn::attached(addr, 65536, export).await.0);
    }
    assert_eq!(conns[0].cat(5, "a.txt").await.unwrap(), b"tenant a\n");
    assert_eq!(conns[1].cat(5, "a.txt").await.unwrap(), b"tenant a\n");
    assert_eq!(conns[2].cat(5, "b.txt").await.unwrap(), b"tenant b\n");
    assert_eq!(tenant_threads(&server), 2, "one thread per tenant");
    // A's first connection gone: a still has one, so its thread stays.
    conns.remove(0);
    assert_eq!(conns[0].cat(6, "a.txt").await.unwrap(), b"tenant a\n");
    assert_eq!(tenant_threads(&server), 2);
    // Every connection gone: so are the threads; a tenant coming back gets one again.
    conns.clear();
    assert!(
        tenant_threads_become(&server, 0).await,
        "tenant threads outlived their connections: {}",
        tenant_threads(&server)
    );
    let mut again = Conn::attached(&addr_b, 65536, &b).await.0;
    assert_eq!(again.cat(5, "b.txt").await.unwrap(), b"tenant b\n");
    assert_eq!(tenant_threads(&server), 1);
}

#[tokio::test]
async fn without_rules_no_connection_gets_a_thread_of_its_own() {
    let t = tenants();
    let work = tempfile::tempdir().unwrap();
    let listen = format!("unix:{}", work.path().join("s").display());
    let server = serve(&with_both_exports(&t, &["--listen", &listen]));
    let addr: Addr = listen.parse().unwrap();
    let (mut conn, _) = Conn::attached(&addr, 65536, &name(t.b.path())).await;
    assert_eq!(conn.cat(5, "b.txt").await.unwrap(), b"tenant b\n");
    assert_eq!(tenant_threads(&server), 0);
}

#[tokio::test]
async fn tenants_past_the_thread_bound_are_served_on_the_shared_threads() {
    let t = tenants();
    let work = tempfile::tempdir().unwrap();
    let Listeners { la, lb, a, b, args } =
        each_on_its_listener(&t, work.path(), &["--max-tenant-threads", "1"]);
    let server = serve(&args);
    let (addr_a, addr_b): (Addr, Addr) = (la.parse().unwrap(), lb.parse().unwrap());
    let mut first = Conn::attached(&addr_a, 65536, &a).await.0;
    // B finds no thread free: served all the same, on the shared workers.
    let mut second = Conn::attached(&addr_b, 65536, &b).await.0;
    assert_eq!(second.cat(5, "b.txt").await.unwrap(), b"tenant b\n");
    assert_eq!(first.cat(5, "a.txt").await.unwrap(), b"tenant a\n");
    assert_eq!(tenant_threads(&server), 1, "past the bound");
    // A's thread gone with A: B's next connection gets it.
    drop(first);
    assert!(tenant_threads_become(&server, 0).await);
    let mut third = Conn::attached(&addr_b, 65536, &b).await.0;
    assert_eq!(third.cat(5, "b.txt").await.unwrap(), b"tenant b\n");
    assert_eq!(second.cat(6, "b.txt").await.unwrap(), b"tenant b\n");
    assert_eq!(tenant_threads(&server), 1);
}
