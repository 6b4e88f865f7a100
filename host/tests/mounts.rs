//! Mount SPECs as a user writes them, and the namespaces they build: embedded 9p (the
//! zero-setup default), remote 9p over loopback, bind; one clear error per mistake;
//! the `--stats` JSON of the CLI contract.

use wasm9p_guest_fs::mount_options::CacheMode;
use wasm9p_host::mounts::{build, stats_json, MountError, MountKind, MountSpec};
use wasm9p_proto::Errno;
use wasm9p_tests::{TestServer, Tree};

fn tree() -> tempfile::TempDir {
    Tree::build(&[Tree::Dir(
        "include",
        vec![Tree::file("stdio.h", "int printf(const char *, ...);\n")],
    )])
}

#[test]
fn specs_parse_as_documented() {
    let s = MountSpec::parse(
        "type=9p,source=tcp:127.0.0.1:564,aname=sysroot,target=/usr,cache=loose,negtimeout=-1,ro",
    )
    .unwrap();
    assert_eq!(s.target, "/usr");
    assert!(s.read_only);
    let MountKind::NinepRemote {
        source,
        aname,
        options,
    } = &s.kind
    else {
        panic!("{s:?}")
    };
    assert_eq!(
        (source.to_string().as_str(), aname.as_str()),
        ("tcp:127.0.0.1:564", "sysroot")
    );
    assert_eq!(options.cache, CacheMode::LOOSE_MODE);
    assert!(options.read_only);

    let s = MountSpec::parse("type=9p,export=/srv/src,target=/src,cache=mmap,msize=65536").unwrap();
    assert!(
        matches!(&s.kind, MountKind::NinepEmbedded { export, options, .. } if export.to_str() == Some("/srv/src") && options.msize == 65536)
    );
    assert_eq!(s.type_name(), "9p");

    let s =
        MountSpec::parse("type=9p,export=/srv/src,target=/src,cache=loose,revalidate=1000,nocto")
            .unwrap();
    assert!(
        matches!(&s.kind, MountKind::NinepEmbedded { options, .. }
            if options.revalidate == Some(std::time::Duration::from_secs(1)) && options.nocto),
        "{s:?}"
    );
    let err = MountSpec::parse("type=9p,export=/srv/src,target=/src,cache=loose,nocto")
        .unwrap_err()
        .to_string();
    assert!(err.contains("nocto"), "{err}");

    let s =
        MountSpec::parse("type=9p,export=/srv/root,target=/,security_model=mapped-xattr").unwrap();
    assert!(
        matches!(&s.kind, MountKind::NinepEmbedded { security, .. }
            if security.model == wasm9p_server::SecurityModel::MappedXattr && !security.allow_devices),
        "{s:?}"
    );
    let s = MountSpec::parse("type=9p,export=/srv/root,target=/,allow_devices").unwrap();
    assert!(
        matches!(&s.kind, MountKind::NinepEmbedded { security, .. } if security.allow_devices),
        "{s:?}"
    );
    for (spec, why) in [
        (
            "type=9p,export=/d,target=/,security_model=root",
            "expected passthrough, mapped-xattr or mapped-file",
        ),
        (
            "type=9p,export=/d,target=/,security_model=mapped-xattr,allow_devices",
            "allow_devices applies to security_model=passthrough",
        ),
        (
            "type=9p,source=tcp:127.0.0.1:564,target=/,security_model=mapped-xattr",
            "applies to embedded exports",
        ),
        (
            "type=bind,source=/tmp,target=/,allow_devices",
            "applies to embedded exports",
        ),
    ] {
        let err = MountSpec::parse(spec).unwrap_err().to_string();
        assert!(err.contains(why), "{spec}: {err}");
    }

    let s = MountSpec::parse("type=bind,source=/tmp,target=/scratch").unwrap();
    assert_eq!(
        s.kind,
        MountKind::Bind {
            source: "/tmp".into()
        }
    );
    assert_eq!(MountSpec::parse_dir("/tmp::/scratch").unwrap(), s);
    assert_eq!(MountSpec::parse_dir("/data").unwrap().target, "/data");
}

#[test]
fn bad_specs_say_what_is_wrong() {
    let cases = [
        ("type=9p,target=/g", "needs source=ADDR or export=HOSTDIR"),
        ("type=9p,source=tcp:h:1,export=/x,target=/g", "not both"),
        (
            "type=9p,source=carrier:pigeon,target=/g",
            "unknown address scheme",
        ),
        (
            "type=9p,export=/x,target=/g,cache=strict",
            "unknown cache mode",
        ),
        (
            "type=9p,export=/x,target=/g,cache=loose,cachetag=sysroot",
            "expected cache=fscache",
        ),
        ("type=9p,export=/x,target=relative", "absolute"),
        ("type=9p,export=/x", "target= is missing"),
        ("source=/x,target=/g", "type= is missing"),
        ("type=nfs,source=/x,target=/g", "unknown type"),
        (
            "type=bind,source=/x,target=/g,cache=loose",
            "applies to 9p mounts",
        ),
        ("type=bind,target=/g", "needs source=HOSTDIR"),
        ("type=9p,export=/x,target=/g,colour=blue", "unknown key"),
        ("type=9p,export=,target=/g", "needs a value"),
    ];
    for (spec, needle) in cases {
        let err = MountSpec::parse(spec).unwrap_err().to_string();
        assert!(
            err.contains(needle) && err.contains(spec) && !err.contains('\n'),
            "{spec}: {err}"
        );
    }
    assert!(MountSpec::parse_dir("::/g").is_err());
    assert!(MountSpec::parse_dir("/x::g").is_err());
}

#[tokio::test]
async fn embedded_remote_and_bind_mounts_build_one_namespace() {
    let embedded = tree();
    let remote = tree();
    let bound = tree();
    let server = TestServer::tcp(remote.path());
    let specs = [
        MountSpec::parse(&format!(
            "type=9p,export={},target=/usr,cache=loose",
            embedded.path().display()
        ))
        .unwrap(),
        MountSpec::parse(&format!(
            "type=9p,source={},target=/remote,cache=none",
            server.addr
        ))
        .unwrap(),
        MountSpec::parse_dir(&format!("{}::/scratch", bound.path().display())).unwrap(),
    ];
    let (ns, mounted) = build(&specs, &Default::default()).await.unwrap();
    for dir in ["/usr", "/remote", "/scratch"] {
        let text = ns.read(&format!("{dir}/include/stdio.h")).await.unwrap();
        assert_eq!(&text[..], b"int printf(const char *, ...);\n", "{dir}");
        for _ in 0..3 {
            assert_eq!(
                ns.resolve(&format!("{dir}/include/missing.h"), true)
                    .await
                    .unwrap_err(),
                Errno::ENOENT
            );
        }
    }
    // Writes through the embedded mount land in the exported directory.
    ns.write(
        "/usr/include/new.h",
        0,
        bytes::Bytes::from_static(b"#pragma once\n"),
    )
    .await
    .unwrap();
    assert!(embedded.path().join("include/new.h").exists());

    let json = stats_json(&mounted, 1, 42);
    assert_eq!(
        (json["guests"].as_u64(), json["wall_ms"].as_u64()),
        (Some(1), Some(42))
    );
    let m = json["mounts"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(
        (m[0]["target"].as_str(), m[0]["type"].as_str()),
        (Some("/usr"), Some("9p"))
    );
    // The first probe of missing.h is the directory's second lookup: its listing is
    // read (complete directories) and answers all three (and the create's own lookup
    // of new.h); without it, a negative dentry would answer the last two.
    let cache = &m[0]["cache"];
    assert!(
        cache["listing_hits"].as_u64().unwrap() >= 3 && m[0]["failed_walks"].as_u64() == Some(0),
        "loose: every probe answered from the cache: {cache}"
    );
    assert_eq!(
        m[1]["cache"]["negative_hits"].as_u64(),
        Some(0),
        "none: every probe asks"
    );
    assert!(
        m[1]["rpc"]["walk"].as_u64().unwrap() >= 4 && m[1]["rpc"]["total"].as_u64().unwrap() > 0
    );
    assert_eq!(
        (m[2]["type"].as_str(), m[2]["rpc"]["total"].as_u64()),
        (Some("bind"), Some(0))
    );
    for key in [
        "dentry_hits",
        "dentry_misses",
        "negative_hits",
        "symlink_hits",
        "attr_hits",
        "page_hits",
        "page_misses",
    ] {
        assert!(m[0]["cache"][key].is_u64(), "{key}");
    }
}

#[tokio::test]
async fn mounts_that_cannot_be_made_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        format!(
            "type=9p,source=unix:{},target=/g",
            dir.path().join("nobody.sock").display()
        ),
        "type=9p,export=/no/such/dir,target=/g".to_string(),
        "type=bind,source=/no/such/dir,target=/g".to_string(),
        "type=plugin,component=fs.wasm,target=/g".to_string(),
    ];
    for spec in cases {
        let parsed = MountSpec::parse(&spec).unwrap();
        let err = match build(&[parsed], &Default::default()).await {
            Err(e @ MountError::Mount { .. }) => e.to_string(),
            Err(e) => panic!("{spec}: wrong kind of error {e}"),
            Ok(_) => panic!("{spec}: mounted"),
        };
        assert!(
            err.starts_with("cannot mount /g: ") && !err.contains('\n'),
            "{spec}: {err}"
        );
    }
    let two = [
        MountSpec::parse_dir("/tmp::/g").unwrap(),
        MountSpec::parse_dir("/tmp::/g").unwrap(),
    ];
    assert!(build(&two, &Default::default())
        .await
        .err()
        .unwrap()
        .to_string()
        .contains("File exists"));
}

#[tokio::test]
async fn an_empty_mount_hides_what_another_mount_has_there_and_takes_no_writes() {
    let embedded = tree();
    let specs = [
        MountSpec::parse(&format!(
            "type=9p,export={},target=/,cache=loose",
            embedded.path().display()
        ))
        .unwrap(),
        MountSpec::parse("type=empty,target=/include").unwrap(),
    ];
    assert!(specs[1].read_only, "an empty mount is read-only");
    assert_eq!(specs[1].type_name(), "empty");
    let (ns, _) = build(&specs, &Default::default()).await.unwrap();
    assert_eq!(
        ns.resolve("/include/stdio.h", true).await.unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(
        ns.write("/include/new.h", 0, bytes::Bytes::from_static(b"x"))
            .await
            .unwrap_err(),
        Errno::EROFS
    );
    assert!(!embedded.path().join("include/new.h").exists());
    for (spec, why) in [
        ("type=empty,target=/g,cache=loose", "applies to 9p mounts"),
        ("type=empty,source=/x,target=/g", "source= does not apply"),
        ("type=empty", "target= is missing"),
    ] {
        let err = MountSpec::parse(spec).unwrap_err().to_string();
        assert!(err.contains(why), "{spec}: {err}");
    }
}

/// Dials every address through a Unix socket of its own choosing, counting the dials:
/// what a containerd shim's container does, asking the host side to connect for it.
struct ThroughSocket {
    socket: std::path::PathBuf,
    dials: std::sync::atomic::AtomicUsize,
}

impl wasm9p_guest_fs::client::Dial for ThroughSocket {
    fn dial<'a>(
        &'a self,
        _addr: &'a wasm9p_proto::Addr,
    ) -> wasm9p_proto::BoxFuture<'a, std::io::Result<wasm9p_proto::transport::BoxStream>> {
        self.dials
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(&self.socket).await?;
            Ok(Box::new(stream) as wasm9p_proto::transport::BoxStream)
        })
    }
}

#[tokio::test]
async fn a_remote_mount_is_reached_through_the_callers_dialer_when_given_one() {
    let remote = tree();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("9p.sock");
    let server = TestServer::start(
        wasm9p_server::ServerConfig {
            exports: vec![wasm9p_server::ExportConfig::new(remote.path())],
            ..Default::default()
        },
        &format!("unix:{}", socket.display()),
    );
    // The SPEC names an address nothing listens at: only the dialer reaches the server.
    let spec = MountSpec::parse(&format!(
        "type=9p,source=unix:{},target=/remote",
        dir.path().join("unreachable.sock").display()
    ))
    .unwrap();
    let dial = std::sync::Arc::new(ThroughSocket {
        socket,
        dials: Default::default(),
    });
    let dialer = wasm9p_guest_fs::client::Dialer::new(dial.clone());
    let (ns, _) = wasm9p_host::mounts::build_dialing(
        std::slice::from_ref(&spec),
        &Default::default(),
        &dialer,
    )
    .await
    .unwrap();
    let text = ns.read("/remote/include/stdio.h").await.unwrap();
    assert_eq!(&text[..], b"int printf(const char *, ...);\n");
    assert_eq!(dial.dials.load(std::sync::atomic::Ordering::Relaxed), 1);
    // Without it, the same SPEC cannot be mounted.
    let err = build(&[spec], &Default::default()).await.err().unwrap();
    assert!(err.to_string().contains("unreachable.sock"), "{err}");
    drop(server);
}
