//! The export changes behind a long-lived mount, on our server and on diod (which
//! sends qid version 0): what each mode believes and when it sees the change.
//!
//! The changes: a header edited, a missing header created, a header deleted, a symlink
//! retargeted, a directory renamed. A metadata mode without LOOSE sees them at once;
//! `revalidate=MS` at the latest MS later (opens at once: close-to-open); loose without
//! `revalidate=` keeps what it cached (its documented trust).

use std::path::Path;

use super::*;
use wasm9p_tests::Diod;

/// A server exporting a directory: ours, or Debian's diod.
pub(super) enum Remote {
    Ours(TestServer),
    Diod(Diod, String),
}

impl Remote {
    pub(super) fn start(kind: &str, dir: &Path) -> Remote {
        match kind {
            "ours" => Remote::Ours(TestServer::tcp(dir)),
            "diod" => Remote::Diod(Diod::start(dir), dir.to_str().unwrap().into()),
            other => panic!("no server {other}"),
        }
    }

    pub(super) async fn mount(&self, spec: &str) -> (Namespace, Arc<NinepFs>) {
        super::mount(self, spec).await
    }
}

impl Serving for Remote {
    fn addr(&self) -> wasm9p_proto::Addr {
        match self {
            Remote::Ours(server) => server.addr.clone(),
            Remote::Diod(diod, _) => wasm9p_proto::Addr::Tcp {
                host: "127.0.0.1".into(),
                port: diod.port,
            },
        }
    }
    fn aname(&self) -> String {
        match self {
            Remote::Ours(_) => String::new(),
            Remote::Diod(_, export) => export.clone(),
        }
    }
}

pub(super) const SERVERS: [&str; 2] = ["ours", "diod"];

fn export() -> tempfile::TempDir {
    Tree::build(&[Tree::Dir(
        "inc",
        vec![
            Tree::file("edited.h", "#define V 1\n"),
            Tree::file("deleted.h", "int deleted;\n"),
            Tree::file("one.h", "int one;\n"),
            Tree::file("two.h", "int two;\n"),
            Tree::Symlink("current.h", "one.h"),
            Tree::Dir("old", vec![Tree::file("x.h", "int x;\n")]),
        ],
    )])
}

/// What a guest would see of the five things that change.
#[derive(Debug, PartialEq, Eq)]
struct View {
    edited: String,
    created: Result<u64, Errno>,
    deleted: Result<u64, Errno>,
    through_link: String,
    old_dir: Result<u64, Errno>,
    new_dir: Result<u64, Errno>,
    listing: Vec<String>,
}

async fn contents(ns: &Namespace, path: &str) -> String {
    let f = ns.open(path, READ).await.unwrap();
    String::from_utf8(f.read_at(0, 4096).await.unwrap().to_vec()).unwrap()
}

async fn size(ns: &Namespace, path: &str) -> Result<u64, Errno> {
    ns.getattr(path, true).await.map(|a| a.size)
}

async fn view(ns: &Namespace) -> View {
    let listing = sorted_names(ns, "/inc").await;
    View {
        edited: contents(ns, "/inc/edited.h").await,
        created: size(ns, "/inc/created.h").await,
        deleted: size(ns, "/inc/deleted.h").await,
        through_link: contents(ns, "/inc/current.h").await,
        old_dir: size(ns, "/inc/old/x.h").await,
        new_dir: size(ns, "/inc/new/x.h").await,
        listing,
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn before() -> View {
    View {
        edited: "#define V 1\n".into(),
        created: Err(Errno::ENOENT),
        deleted: Ok(13),
        through_link: "int one;\n".into(),
        old_dir: Ok(7),
        new_dir: Err(Errno::ENOENT),
        listing: names(&[
            "current.h",
            "deleted.h",
            "edited.h",
            "old",
            "one.h",
            "two.h",
        ]),
    }
}

fn after() -> View {
    View {
        edited: "#define V 2 /* edited */\n".into(),
        created: Ok(12),
        deleted: Err(Errno::ENOENT),
        through_link: "int two;\n".into(),
        old_dir: Err(Errno::ENOENT),
        new_dir: Ok(7),
        listing: names(&[
            "created.h",
            "current.h",
            "edited.h",
            "new",
            "one.h",
            "two.h",
        ]),
    }
}

/// Makes the five changes on the server's side, as an editor or a build would.
fn change(root: &Path) {
    let inc = root.join("inc");
    // Timestamps (and so versions) have a granularity: let it pass.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(inc.join("edited.h"), "#define V 2 /* edited */\n").unwrap();
    std::fs::write(inc.join("created.h"), "int created;").unwrap();
    std::fs::remove_file(inc.join("deleted.h")).unwrap();
    std::fs::remove_file(inc.join("current.h")).unwrap();
    std::os::unix::fs::symlink("two.h", inc.join("current.h")).unwrap();
    std::fs::rename(inc.join("old"), inc.join("new")).unwrap();
}

#[tokio::test]
async fn without_loose_metadata_modes_see_every_change_behind_the_mount_at_once() {
    for server in SERVERS {
        for spec in [
            "cache=0x3",
            "cache=0x2",
            "cache=loose,revalidate=0",
            "cache=0x3,negtimeout=-1",
        ] {
            let dir = export();
            let remote = Remote::start(server, dir.path());
            let (ns, _fs) = remote.mount(spec).await;
            assert_eq!(view(&ns).await, before(), "{server} {spec}");
            assert_eq!(view(&ns).await, before(), "{server} {spec}: warm");
            change(dir.path());
            assert_eq!(view(&ns).await, after(), "{server} {spec}");
        }
    }
}

#[tokio::test]
async fn revalidate_sees_every_change_once_the_window_has_passed() {
    for server in SERVERS {
        let dir = export();
        let remote = Remote::start(server, dir.path());
        let (ns, fs) = remote.mount("cache=loose,revalidate=200").await;
        assert_eq!(view(&ns).await, before(), "{server}");
        change(dir.path());
        // An open asks the server at once (close-to-open): the edited header's new
        // contents, even before the window is over.
        assert_eq!(
            contents(&ns, "/inc/edited.h").await,
            after().edited,
            "{server}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(view(&ns).await, after(), "{server}");
        assert_eq!(view(&ns).await, after(), "{server}: and it stays so");
        assert!(
            fs.stats().cache.dentry_hits > 0,
            "{server}: the cache was used"
        );
    }
}

#[tokio::test]
async fn within_the_window_cached_answers_cost_no_rpc_and_loose_trusts_forever() {
    for server in SERVERS {
        let dir = export();
        let remote = Remote::start(server, dir.path());
        let (ns, fs) = remote.mount("cache=loose,revalidate=600000").await;
        let (loose_ns, loose) = remote.mount("cache=loose").await;
        for (ns, fs) in [(&ns, &fs), (&loose_ns, &loose)] {
            assert_eq!(view(ns).await, before(), "{server}");
            let sent = fs.session().counts().total();
            for path in ["/inc/created.h", "/inc/deleted.h", "/inc/old/x.h"] {
                size(ns, path).await.ok();
            }
            ns.readdir("/inc").await.unwrap();
            assert_eq!(
                fs.session().counts().total(),
                sent,
                "{server}: young answers are believed"
            );
        }
        change(dir.path());
        // Loose keeps what it cached, opens included: its trust is forever.
        let loose_view = view(&loose_ns).await;
        assert_eq!(loose_view, before(), "{server}: loose");
        // The window: names and attributes as cached, but opens see new contents.
        let windowed = view(&ns).await;
        assert_eq!(
            windowed,
            View {
                edited: after().edited,
                ..before()
            },
            "{server}: revalidate=600000"
        );
    }
}

#[tokio::test]
async fn one_look_at_a_directory_confirms_every_name_cached_in_it_when_the_server_has_versions() {
    let names: Vec<String> = (0..20).map(|i| format!("/inc/missing{i}.h")).collect();
    for server in SERVERS {
        let dir = export();
        let remote = Remote::start(server, dir.path());
        let (ns, fs) = remote.mount("cache=loose,revalidate=1000").await;
        for name in &names {
            assert_eq!(size(&ns, name).await, Err(Errno::ENOENT));
        }
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let walks = rpcs(&fs, "walk");
        let getattrs = rpcs(&fs, "getattr");
        let revalidated = fs.stats().cache.revalidated;
        let listings = fs.stats().cache.listings_read;
        for name in &names {
            assert_eq!(size(&ns, name).await, Err(Errno::ENOENT), "{server}");
        }
        let (walks, getattrs) = (rpcs(&fs, "walk") - walks, rpcs(&fs, "getattr") - getattrs);
        let revalidated = fs.stats().cache.revalidated - revalidated;
        let listings = fs.stats().cache.listings_read - listings;
        match server {
            // The root by a Tgetattr, /inc by a Twalk; then all 20 names believed.
            "ours" => {
                assert_eq!((walks, getattrs), (1, 1), "{server}");
                assert_eq!(
                    revalidated, 2,
                    "{server}: /inc in the root, one name in /inc"
                );
            }
            // diod's directories have no version: every name is asked again, walked
            // or in /inc's listing read again (complete directories).
            _ => {
                assert!(walks >= 20 || listings >= 1, "{server}: {walks} walks");
                assert_eq!(revalidated, 0, "{server}");
            }
        }
    }
}

#[tokio::test]
async fn a_file_kept_open_reads_the_new_version_once_the_window_has_passed() {
    for server in SERVERS {
        let dir = export();
        let remote = Remote::start(server, dir.path());
        let (ns, fs) = remote.mount("cache=loose,revalidate=200").await;
        let f = ns.open("/inc/edited.h", READ).await.unwrap();
        assert_eq!(&f.read_at(0, 100).await.unwrap()[..], b"#define V 1\n");
        change(dir.path());
        // Within the window the open reads its pages without asking.
        let sent = fs.session().counts().total();
        let early = f.read_at(0, 100).await.unwrap();
        if fs.session().counts().total() == sent {
            assert_eq!(&early[..], b"#define V 1\n", "{server}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let getattrs = rpcs(&fs, "getattr");
        assert_eq!(
            &f.read_at(0, 100).await.unwrap()[..],
            b"#define V 2 /* edited */\n",
            "{server}"
        );
        assert_eq!(rpcs(&fs, "getattr"), getattrs + 1, "{server}: one check");
    }
}

#[tokio::test]
async fn nocto_opens_believe_the_file_for_the_window_and_see_changes_after_it() {
    for server in SERVERS {
        let dir = export();
        let remote = Remote::start(server, dir.path());
        let (long, long_fs) = remote.mount("cache=loose,revalidate=600000,nocto").await;
        let (short, _) = remote.mount("cache=loose,revalidate=200,nocto").await;
        for ns in [&long, &short] {
            assert_eq!(view(ns).await, before(), "{server}");
        }
        change(dir.path());
        // Within the window a reopen asks nothing and reads the pages it had.
        let sent = long_fs.session().counts().total();
        assert_eq!(
            contents(&long, "/inc/edited.h").await,
            before().edited,
            "{server}"
        );
        assert_eq!(long_fs.session().counts().total(), sent, "{server}");
        // After it, everything is seen as it is now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(view(&short).await, after(), "{server}");
    }
}
