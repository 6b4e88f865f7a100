//! `wasm9p serve` as a user runs it: the real binary, real sockets (tcp, unix, and the
//! hybrid-vsock path over Unix sockets), clean shutdown, and one-line errors.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use tokio::io::AsyncWriteExt;
use wasm9p_proto::transport::fc_vsock_accept_handshake;
use wasm9p_proto::Addr;
use wasm9p_tests::{spawn_serve, Conn, Reaped, Tree};

const BIN: &str = env!("CARGO_BIN_EXE_wasm9p");

/// Starts `wasm9p serve` and waits for its "serving" line on stderr.
fn serve(args: &[&str]) -> Reaped {
    spawn_serve(BIN, args).0
}

fn terminate(child: Reaped) -> std::process::ExitStatus {
    signal(child, "-TERM")
}

fn signal(mut child: Reaped, sig: &str) -> std::process::ExitStatus {
    let pid = child.id() as libc::pid_t;
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    child.wait().unwrap()
}

fn fixture() -> tempfile::TempDir {
    Tree::build(&[Tree::file("greeting", "hi there\n")])
}

#[tokio::test]
async fn serves_on_unix_socket_and_stops_cleanly_on_sigterm() {
    let dir = fixture();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("9p.sock");
    let child = serve(&[
        "--export",
        dir.path().to_str().unwrap(),
        "--listen",
        &format!("unix:{}", sock.display()),
    ]);
    let (mut c, _) = Conn::attached(&Addr::Unix(sock.clone()), 65536, "").await;
    assert_eq!(c.cat(1, "greeting").await.unwrap(), b"hi there\n");
    drop(c);
    let status = terminate(child);
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists(), "socket file removed on shutdown");
}

#[tokio::test]
async fn serves_several_listeners_read_only() {
    let dir = fixture();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("ro.sock");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = serve(&[
        "--export",
        dir.path().to_str().unwrap(),
        "--listen",
        &format!("tcp:127.0.0.1:{port}"),
        "--listen",
        &format!("unix:{}", sock.display()),
        "--read-only",
        "--msize",
        "16384",
    ]);
    for addr in [
        Addr::Tcp {
            host: "127.0.0.1".into(),
            port,
        },
        Addr::Unix(sock.clone()),
    ] {
        let (mut c, _) = Conn::attached(&addr, 1 << 20, "").await;
        assert_eq!(c.msize, 16384, "--msize caps the negotiated size");
        let mkdir = wasm9p_proto::Tmkdir {
            dfid: 0,
            name: "x".into(),
            mode: 0o755,
            gid: 0,
        };
        assert_eq!(c.rpc(mkdir).await, Err(wasm9p_proto::Errno::EROFS));
    }
    assert!(
        signal(child, "-INT").success(),
        "SIGINT stops it cleanly too"
    );
}

/// A stand-in for the Firecracker VMM's vsock muxer: accepts on `uds`, reads
/// `CONNECT <port>`, connects to `uds_<port>` (where the host-side server listens),
/// answers `OK`, and relays bytes both ways.
async fn vmm_muxer(uds: &Path) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::UnixListener::bind(uds).unwrap();
    let uds = uds.to_owned();
    tokio::spawn(async move {
        let (mut guest_side, _) = listener.accept().await.unwrap();
        let port = fc_vsock_accept_handshake(&mut guest_side).await.unwrap();
        let mut host_side = tokio::net::UnixStream::connect(Addr::fc_vsock_listen_path(&uds, port))
            .await
            .unwrap();
        guest_side.write_all(b"OK 1073741824\n").await.unwrap();
        let _ = tokio::io::copy_bidirectional(&mut guest_side, &mut host_side).await;
    })
}

#[tokio::test]
async fn fc_vsock_listener_and_connect_handshake_end_to_end() {
    let dir = fixture();
    let vm_dir = tempfile::tempdir().unwrap();
    let uds = vm_dir.path().join("v.sock");
    let child = serve(&[
        "--export",
        dir.path().to_str().unwrap(),
        "--listen",
        &format!("fc-vsock:{}:5640", uds.display()),
    ]);
    assert!(
        vm_dir.path().join("v.sock_5640").exists(),
        "server listens on UDS_PORT"
    );
    let muxer = vmm_muxer(&uds).await;
    let addr: Addr = format!("fc-vsock:{}:5640", uds.display()).parse().unwrap();
    let (mut c, _) = Conn::attached(&addr, 65536, "").await;
    assert_eq!(c.cat(1, "greeting").await.unwrap(), b"hi there\n");
    drop(c);
    muxer.await.unwrap();
    assert!(terminate(child).success());
}

#[test]
fn bad_options_print_one_line_and_exit_2() {
    let dir = fixture();
    let export = dir.path().to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--export", export, "--listen", "tcp:127.0.0.1"],
            "expected tcp:HOST:PORT",
        ),
        (
            vec!["--export", export, "--listen", "carrier-pigeon:1"],
            "unknown address scheme",
        ),
        (
            vec![
                "--export",
                export,
                "--listen",
                "tcp:127.0.0.1:0",
                "--msize",
                "100",
            ],
            "msize must be between",
        ),
        (
            vec!["--export", "/no/such/dir", "--listen", "tcp:127.0.0.1:0"],
            "/no/such/dir",
        ),
        (vec!["--listen", "tcp:127.0.0.1:0"], "--export"),
        (
            vec![
                "--export",
                export,
                "--listen",
                "tcp:127.0.0.1:0",
                "--security-model",
                "none",
            ],
            "expected passthrough, mapped-xattr or mapped-file",
        ),
        (
            vec![
                "--export",
                export,
                "--listen",
                "tcp:127.0.0.1:0",
                "--security-model",
                "mapped-file",
                "--allow-devices",
            ],
            "--allow-devices applies to --security-model passthrough",
        ),
    ];
    for (args, needle) in cases {
        let out = Command::new(BIN).arg("serve").args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("backtrace"),
            "{stderr}"
        );
    }
}

#[test]
fn listening_on_a_port_in_use_is_a_clear_error() {
    let dir = fixture();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("tcp:127.0.0.1:{}", taken.local_addr().unwrap().port());
    let out = Command::new(BIN)
        .args([
            "serve",
            "--export",
            dir.path().to_str().unwrap(),
            "--listen",
            &addr,
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot listen on"), "{stderr}");
}

#[tokio::test]
async fn survives_its_stderr_reader_going_away() {
    let dir = fixture();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Reaped::spawn(
        Command::new(BIN)
            .args([
                "serve",
                "--export",
                dir.path().to_str().unwrap(),
                "--listen",
                &format!("tcp:127.0.0.1:{port}"),
            ])
            .stderr(Stdio::piped()),
    );
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    drop(stderr); // whoever watched the log is gone
    let (mut c, _) = Conn::attached(
        &Addr::Tcp {
            host: "127.0.0.1".into(),
            port,
        },
        65536,
        "",
    )
    .await;
    assert_eq!(c.cat(1, "greeting").await.unwrap(), b"hi there\n");
    assert!(
        terminate(child).success(),
        "writing the shutdown line must not kill the server"
    );
}
