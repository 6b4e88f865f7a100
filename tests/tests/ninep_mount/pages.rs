//! The page cache across opens and file versions, readers and writers at once, and
//! when a loose reopen needs the server.

use super::coherence::{Remote, SERVERS};
use super::*;

#[tokio::test]
async fn pages_are_shared_by_every_open_and_follow_the_file_version() {
    for kind in SERVERS {
        let dir = tree();
        let header: Vec<u8> = (0..300_000u32).map(|i| (i % 239) as u8).collect();
        std::fs::write(dir.path().join("big.h"), &header).unwrap();
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=loose").await;
        // The first guest reads the header: pages come from the server.
        let first = open(&ns, &fs, "/big.h", READ).await;
        assert!(first.read_at(0, 1 << 20).await.unwrap() == header);
        drop(first);
        // Eight more guests read it: no Tread at all.
        let reads = rpcs(&fs, "read");
        for _ in 0..8 {
            let f = open(&ns, &fs, "/big.h", READ).await;
            assert!(f.read_at(0, 1 << 20).await.unwrap() == header);
            assert_eq!(
                &f.read_at(299_990, 100).await.unwrap()[..],
                &header[299_990..]
            );
            assert!(
                f.read_at(300_000, 10).await.unwrap().is_empty(),
                "end of file, from the cache"
            );
        }
        assert_eq!(
            rpcs(&fs, "read"),
            reads,
            "every page served from the shared cache"
        );
        // The file changes on the server. Loose trusts what it cached (v9fs: "for
        // exclusive or read-only mounts"); a mount that opens on the server (mmap, pages
        // without metadata caching) sees the new version at the next open, not old pages.
        let (ns_mmap, fs_mmap) = mount(&server, "cache=mmap").await;
        let f = open(&ns_mmap, &fs_mmap, "/big.h", READ).await;
        assert!(f.read_at(0, 1 << 20).await.unwrap() == header);
        std::fs::write(dir.path().join("big.h"), b"rewritten").unwrap();
        let f = open(&ns_mmap, &fs_mmap, "/big.h", READ).await;
        assert_eq!(&f.read_at(0, 100).await.unwrap()[..], b"rewritten");
        // A loose open for writing goes to the server (and sees the new version); writing
        // through it, then reading through it, sees the write.
        let rw = OpenFlags {
            read: true,
            write: true,
            ..Default::default()
        };
        let f = open(&ns, &fs, "/big.h", rw).await;
        assert_eq!(&f.read_at(0, 3).await.unwrap()[..], b"rew");
        f.write_at(0, Bytes::from_static(b"RE")).await.unwrap();
        assert_eq!(&f.read_at(0, 100).await.unwrap()[..], b"REwritten");
        f.flush().await.unwrap();
    }
}

#[tokio::test]
async fn an_open_reader_sees_writes_and_truncates_through_another_open() {
    // Found by fsx through `wasm9p mount`: a reader's pages, keyed by the version the
    // file was opened at, outlived a write through another open of the same mount.
    for mode in ["cache=mmap", "cache=loose"] {
        let dir = tree();
        std::fs::write(dir.path().join("f"), vec![0u8; 100_000]).unwrap();
        let server = TestServer::tcp(dir.path());
        let (ns, fs) = mount(&server, mode).await;
        let reader = open(&ns, &fs, "/f", READ).await;
        assert!(reader
            .read_at(0, 100_000)
            .await
            .unwrap()
            .iter()
            .all(|&b| b == 0));
        let rw = OpenFlags {
            read: true,
            write: true,
            ..Default::default()
        };
        let writer = open(&ns, &fs, "/f", rw).await;
        // A partial-page write, still buffered by write-back: the reader sees it.
        writer
            .write_at(40_000, Bytes::from_static(b"fresh"))
            .await
            .unwrap();
        assert_eq!(
            &reader.read_at(39_998, 9).await.unwrap()[..],
            b"\0\0fresh\0\0",
            "{mode}"
        );
        // A truncate through the namespace: the reader's next read ends there.
        let shorter = SetAttr {
            size: Some(40_002),
            ..Default::default()
        };
        ns.setattr("/f", &shorter, true).await.unwrap();
        assert_eq!(
            &reader.read_at(39_998, 100).await.unwrap()[..],
            b"\0\0fr",
            "{mode}"
        );
        // Pages of a file nobody changed are still shared (no extra Tread).
        writer.flush().await.unwrap();
        let reads = rpcs(&fs, "read");
        assert_eq!(&reader.read_at(39_998, 100).await.unwrap()[..], b"\0\0fr");
        assert_eq!(
            rpcs(&fs, "read"),
            reads,
            "{mode}: the new generation is cached"
        );
    }
}

#[tokio::test]
async fn cached_9p_lookups_complete_without_suspending() {
    for kind in SERVERS {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        fn poll_once<F: Future>(f: F) -> Option<F::Output> {
            let mut f = std::pin::pin!(f);
            match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(v) => Some(v),
                Poll::Pending => None,
            }
        }
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=loose").await;
        // Cold: the first resolution has to ask the server, so it suspends.
        assert!(poll_once(ns.resolve("/usr/include/stdio.h", true)).is_none());
        ns.resolve("/usr/include/stdio.h", true).await.unwrap();
        ns.resolve("/usr/include/missing.h", true)
            .await
            .unwrap_err();
        ns.readlink("/link").await.unwrap();
        ns.resolve("/link", true).await.unwrap();
        let walks = rpcs(&fs, "walk");
        // Warm: present, missing and through a symlink, all answered on the first poll.
        let found = poll_once(ns.resolve("/usr/include/stdio.h", true)).expect("no suspension");
        assert!(found.is_ok());
        let missing = poll_once(ns.resolve("/usr/include/missing.h", true)).expect("no suspension");
        assert_eq!(missing.unwrap_err(), Errno::ENOENT);
        let via_link = poll_once(ns.resolve("/link", true)).expect("no suspension");
        assert!(via_link.is_ok());
        assert_eq!(rpcs(&fs, "walk"), walks);
    }
}

/// Several readers at once on one mount, every file read in small pieces while
/// readahead pipelines and abandons larger reads: what each reads is the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_with_readahead_read_every_file_whole() {
    for kind in SERVERS {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for i in 0..120usize {
            let len = (i * 7919) % 70_000;
            let data: Vec<u8> = (0..len).map(|j| (j * 31 + i) as u8).collect();
            std::fs::write(dir.path().join(format!("f{i}")), &data).unwrap();
            files.push((format!("/f{i}"), data));
        }
        let files = Arc::new(files);
        let server = Remote::start(kind, dir.path());
        for spec in [
            "cache=none,msize=8192",
            "cache=readahead,msize=8192",
            "cache=loose,msize=8192",
        ] {
            let (ns, _fs) = mount(&server, spec).await;
            let ns = Arc::new(ns);
            let mut tasks = Vec::new();
            for t in 0..4usize {
                let (ns, files) = (ns.clone(), files.clone());
                tasks.push(tokio::spawn(async move {
                    for round in 0..3 {
                        for k in 0..files.len() {
                            let (path, want) = &files[(k * 7 + t * 13 + round) % files.len()];
                            let file = ns
                                .open(
                                    path,
                                    OpenFlags {
                                        read: true,
                                        ..Default::default()
                                    },
                                )
                                .await
                                .unwrap_or_else(|e| panic!("{kind} {spec}: open {path}: {e}"));
                            let mut got = Vec::new();
                            loop {
                                let piece = file
                                    .read_at(got.len() as u64, 4096)
                                    .await
                                    .unwrap_or_else(|e| panic!("{kind} {spec}: read {path}: {e}"));
                                if piece.is_empty() {
                                    break;
                                }
                                got.extend_from_slice(&piece);
                            }
                            assert!(
                                got == *want,
                                "{spec}: {path} read {} bytes, not its {}",
                                got.len(),
                                want.len()
                            );
                        }
                    }
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        }
    }
}

/// Writes an open file still buffers count for a stat by path, and land before a
/// truncate by path (v9fs writes dirty pages back before getattr and setattr).
#[tokio::test]
async fn buffered_writes_are_sent_before_a_stat_or_truncate_by_path() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        for spec in ["cache=mmap", "cache=loose"] {
            let (ns, fs) = mount(&server, spec).await;
            ns.create("/grow", 0o644, true).await.unwrap();
            let file = ns
                .open(
                    "/grow",
                    OpenFlags {
                        write: true,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            file.write_at(0, Bytes::from_static(b"0123456789"))
                .await
                .unwrap();
            assert_eq!(rpcs(&fs, "write"), 0, "{spec}: buffered");
            assert_eq!(ns.getattr("/grow", true).await.unwrap().size, 10, "{spec}");
            file.write_at(20, Bytes::from_static(b"tail"))
                .await
                .unwrap();
            let truncate = wasm9p_guest_fs::backend::SetAttr {
                size: Some(5),
                ..Default::default()
            };
            ns.setattr("/grow", &truncate, true).await.unwrap();
            file.flush().await.unwrap();
            drop(file);
            assert_eq!(
                std::fs::read(dir.path().join("grow")).unwrap(),
                b"01234",
                "{spec}: the truncate came after the buffered writes"
            );
            std::fs::remove_file(dir.path().join("grow")).unwrap();
        }
    }
}

async fn read_all(ns: &Namespace, path: &str) -> Result<Bytes, Errno> {
    let file = ns
        .open(
            path,
            OpenFlags {
                read: true,
                ..Default::default()
            },
        )
        .await?;
    let size = file.size().await?;
    let data = file.read_at(0, 4096).await?;
    assert_eq!(data.len() as u64, size);
    Ok(data)
}

/// Loose mode: reopening a file read before costs no RPC (not even Twalk/Tlopen/
/// Tclunk); a file changed through the mount is opened on the server again and read
/// fresh; a first open still goes to the server, so its errors come from there.
#[tokio::test]
async fn loose_reopen_of_a_file_only_opened_before_sends_nothing() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=loose").await;
        let read = OpenFlags {
            read: true,
            ..Default::default()
        };
        // Opened and closed, never read (what a build's existence checks do).
        drop(ns.open("/b", read).await.unwrap());
        assert_eq!(rpcs(&fs, "lopen"), 1);
        // Let the first open's Tclunk (sent by a spawned task) go out before counting.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let before = fs.session().counts().total();
        for _ in 0..100 {
            drop(ns.open("/b", read).await.unwrap());
        }
        assert_eq!(fs.session().counts().total(), before, "warm opens, no RPC");
        // A read through such an open still gets the file: from the pages the first
        // open brought in its flight (our server), or opened on the server then (diod).
        assert_eq!(read_all(&ns, "/b").await.unwrap(), "content of b");
        let opens = match kind {
            "ours" => 1,
            _ => 2,
        };
        assert_eq!(rpcs(&fs, "lopen"), opens, "{kind}");
        // New permissions through the mount: the server decides the next open again.
        let chmod = wasm9p_guest_fs::backend::SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        ns.setattr("/b", &chmod, true).await.unwrap();
        drop(ns.open("/b", read).await.unwrap());
        assert_eq!(rpcs(&fs, "lopen"), opens + 1, "{kind}");
        // ... and once it has, the opens after it are warm again.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let before = fs.session().counts().total();
        drop(ns.open("/b", read).await.unwrap());
        assert_eq!(
            fs.session().counts().total(),
            before,
            "warm again after the change"
        );
    }
}

#[tokio::test]
async fn loose_reopens_of_a_file_written_through_the_mount_go_out_once_then_are_warm() {
    for kind in SERVERS {
        // A file made by the build itself (a generated header), then included many times.
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=loose").await;
        ns.write(
            "/generated.h",
            0,
            Bytes::from_static(b"#define GENERATED 1\n"),
        )
        .await
        .unwrap();
        let read = OpenFlags {
            read: true,
            ..Default::default()
        };
        let lopens = rpcs(&fs, "lopen");
        drop(ns.open("/generated.h", read).await.unwrap());
        assert_eq!(
            rpcs(&fs, "lopen"),
            lopens + 1,
            "the first open after the write asks"
        );
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let before = fs.session().counts().total();
        for _ in 0..100 {
            drop(ns.open("/generated.h", read).await.unwrap());
        }
        assert_eq!(
            fs.session().counts().total(),
            before,
            "100 warm opens, no RPC"
        );
        assert_eq!(
            read_all(&ns, "/generated.h").await.unwrap(),
            "#define GENERATED 1\n"
        );
        // Written again: the next open asks again, and reads the new bytes.
        ns.write(
            "/generated.h",
            0,
            Bytes::from_static(b"#define GENERATED 2\n"),
        )
        .await
        .unwrap();
        assert_eq!(
            read_all(&ns, "/generated.h").await.unwrap(),
            "#define GENERATED 2\n"
        );
    }
}

#[tokio::test]
async fn loose_reopen_of_a_file_read_before_sends_nothing() {
    for kind in SERVERS {
        let dir = tree();
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=loose").await;
        assert_eq!(read_all(&ns, "/a").await.unwrap(), "content of a");
        let before = fs.session().counts().total();
        for _ in 0..100 {
            assert_eq!(read_all(&ns, "/a").await.unwrap(), "content of a");
        }
        assert_eq!(
            fs.session().counts().total(),
            before,
            "100 warm opens, no RPC"
        );

        // Changed through the mount: the next open asks the server and sees the change.
        ns.write("/a", 0, Bytes::from_static(b"CONTENT"))
            .await
            .unwrap();
        assert_eq!(read_all(&ns, "/a").await.unwrap(), "CONTENT of a");
        assert!(rpcs(&fs, "lopen") > 0);

        // A first open goes to the server, which answers for it.
        let missing = read_all(&ns, "/usr/include/none.h").await.unwrap_err();
        assert_eq!(missing, Errno::ENOENT);
    }
}

#[tokio::test]
async fn a_server_without_qid_versions_still_gets_its_changed_files_read_again() {
    // diod sends qid version 0 for every file: in the page-cache modes that trust no
    // metadata, a file changed on the server (same size, new contents) is read anew by
    // the next open, not served from the pages of before.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.h");
    std::fs::write(&path, "#define V 1\n").unwrap();
    let diod = wasm9p_tests::Diod::start(dir.path());
    let addr = wasm9p_proto::Addr::Tcp {
        host: "127.0.0.1".into(),
        port: diod.port,
    };
    for cache in ["readahead", "mmap"] {
        let opts = options(&format!("cache={cache}"));
        let session = Session::connect(&addr, ClientConfig::default())
            .await
            .unwrap();
        let fs = Arc::new(
            NinepFs::attach(&session, dir.path().to_str().unwrap(), &opts)
                .await
                .unwrap(),
        );
        let mut ns = Namespace::new();
        ns.mount("/", fs.clone(), false).unwrap();
        std::fs::write(&path, "#define V 1\n").unwrap();
        let read = |ns: &Namespace| {
            let ns = ns.clone();
            async move {
                let f = ns.open("/config.h", READ).await.unwrap();
                f.read_at(0, 100).await.unwrap()
            }
        };
        assert_eq!(read(&ns).await, Bytes::from("#define V 1\n"), "{cache}");
        let version = ns.resolve("/config.h", true).await.unwrap();
        assert_eq!(
            version.node.id,
            std::fs::metadata(&path)
                .map(|m| {
                    use std::os::unix::fs::MetadataExt;
                    m.ino()
                })
                .unwrap(),
            "{cache}: diod's qid path is the inode"
        );
        // Unchanged: the next open reads from the pages.
        let before = rpcs(&fs, "read");
        assert_eq!(read(&ns).await, Bytes::from("#define V 1\n"), "{cache}");
        assert_eq!(rpcs(&fs, "read"), before, "{cache}: pages reused");
        // Changed on the server behind the mount, to the same size.
        std::thread::sleep(Duration::from_millis(10));
        std::fs::write(&path, "#define V 2\n").unwrap();
        assert_eq!(read(&ns).await, Bytes::from("#define V 2\n"), "{cache}");
    }
}

/// Loose mode: an open that has not reached the server yet (a warm reopen) still has
/// its file after the mount unlinks it, renames another file over it, or renames the
/// directory above it: it reads the file's own bytes where the pages miss, and its
/// fstat says the file has no link left, as POSIX says of any open file.
#[tokio::test]
async fn a_deferred_open_keeps_its_file_through_unlink_and_renames() {
    for kind in SERVERS {
        let dir = tree();
        let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        for name in ["gone.h", "over.h", "usr/include/moved.h"] {
            std::fs::write(dir.path().join(name), &big).unwrap();
        }
        let server = Remote::start(kind, dir.path());
        let (ns, fs) = mount(&server, "cache=loose").await;
        // Opened once (the server's answer is known), then opened warm: deferred.
        let warm = |path: &'static str| {
            let (ns, fs) = (&ns, &fs);
            async move {
                drop(open(ns, fs, path, READ).await);
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                let lopens = rpcs(fs, "lopen");
                let file = open(ns, fs, path, READ).await;
                assert_eq!(rpcs(fs, "lopen"), lopens, "{kind}: {path} is deferred");
                file
            }
        };
        let tail = |file: Box<dyn OpenFile>| {
            let big = &big;
            async move {
                let got = file.read_at(900_000, 100_000).await.unwrap();
                assert!(got == big[900_000..], "{kind}: the file's own bytes");
            }
        };

        // fstat: ours answers through the open file. diod looks the fid's path up
        // again (ENOENT once unlinked, the new file once replaced), deferred or not.
        let links = |fstat: Result<wasm9p_guest_fs::node::Attr, Errno>| {
            if kind == "ours" {
                assert_eq!(fstat.unwrap().nlink, 0, "no link left");
            }
        };
        let gone = warm("/gone.h").await;
        ns.unlink("/gone.h", false).await.unwrap();
        links(gone.getattr().await);
        tail(gone).await;

        let over = warm("/over.h").await;
        ns.rename("/a", "/over.h").await.unwrap();
        links(over.getattr().await);
        tail(over).await;
        assert_eq!(
            &read_all(&ns, "/over.h").await.unwrap()[..],
            b"content of a"
        );

        let moved = warm("/usr/include/moved.h").await;
        ns.rename("/usr", "/usr2").await.unwrap();
        tail(moved).await;
        // A file made since at the old path is not the open's.
        ns.mkdir("/usr", 0o755).await.unwrap();
        ns.mkdir("/usr/include", 0o755).await.unwrap();
        ns.create("/usr/include/moved.h", 0o644, true)
            .await
            .unwrap();
        let moved = warm("/usr2/include/moved.h").await;
        ns.unlink("/usr2/include/moved.h", false).await.unwrap();
        tail(moved).await;
    }
}
