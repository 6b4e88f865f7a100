//! Answers that left the server before a change made through the same mount and reach
//! the mount after it: none may remove, re-add or hide what the change did, whether
//! it would land in a dentry, a negative entry, a listing, a complete listing, a
//! directory's attributes or the store on disk (`cache=fscache`, read by a later
//! mount).
//!
//! Each case is one interleaving, made deterministic by a [`ReplyGate`] between the
//! mount and our server: guest A's request (a walk to the name, the directory's
//! listing read whole, its complete listing, its attributes) reaches the server and is
//! answered; the gate holds the reply; guest B changes the directory through the same
//! mount (create, mkdir, symlink, link, mknod, rename in, rename out, unlink, rmdir);
//! then A's reply goes on. Afterwards every answer about the directory must be what a
//! `cache=none` mount of the same server says.

use wasm9p_guest_fs::backend::{Kind, NewNode, Node, Special};
use wasm9p_proto::Message;
use wasm9p_tests::reply_gate::ReplyGate;

use super::*;

/// What guest B does to `/d/x` (`/e/x` and `/f` are there to move and link).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Create,
    Mkdir,
    Symlink,
    Link,
    Mknod,
    RenameIn,
    RenameOut,
    Unlink,
    Rmdir,
}

const CHANGES: [Change; 9] = [
    Change::Create,
    Change::Mkdir,
    Change::Symlink,
    Change::Link,
    Change::Mknod,
    Change::RenameIn,
    Change::RenameOut,
    Change::Unlink,
    Change::Rmdir,
];

/// Which answer of guest A is late.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    /// The walk of a lookup of `/d/x` (a dentry, or a negative one).
    Walk,
    /// `/d`'s listing read whole for readdir.
    Listing,
    /// `/d`'s listing read as a complete directory (at its second lookup).
    Complete,
    /// `/d`'s attributes (its mtime and link count move with the change).
    DirAttr,
}

const ANSWERS: [Answer; 4] = [
    Answer::Walk,
    Answer::Listing,
    Answer::Complete,
    Answer::DirAttr,
];

impl Change {
    /// The export before the change.
    fn export(self) -> tempfile::TempDir {
        let mut d = vec![Tree::file("keep", "kept\n")];
        match self {
            Change::RenameOut | Change::Unlink => d.push(Tree::file("x", "x\n")),
            Change::Rmdir => d.push(Tree::Dir("x", vec![])),
            _ => {}
        }
        let e = match self {
            Change::RenameIn => vec![Tree::file("x", "moved in\n")],
            _ => vec![],
        };
        Tree::build(&[
            Tree::Dir("d", d),
            Tree::Dir("e", e),
            Tree::file("f", "linked\n"),
        ])
    }

    /// Whether B's change asks about `/d/x` itself first, and so waits for a walk of
    /// it already on the wire (the two cannot interleave; the order is then serial).
    fn looks_up_first(self) -> bool {
        matches!(self, Change::Unlink | Change::Rmdir)
    }

    async fn apply(self, fs: Arc<NinepFs>, nodes: Nodes) -> Result<(), Errno> {
        let Nodes { d, e, f } = &nodes;
        match self {
            Change::Create => {
                let file = NewNode::File {
                    mode: 0o644,
                    exclusive: true,
                };
                fs.make(d, "x", file).await.map(drop)
            }
            Change::Mkdir => fs
                .make(d, "x", NewNode::Dir { mode: 0o755 })
                .await
                .map(drop),
            Change::Symlink => {
                let link = NewNode::Symlink { target: "keep" };
                fs.make(d, "x", link).await.map(drop)
            }
            Change::Link => fs.link(f, d, "x").await,
            Change::Mknod => {
                let fifo = NewNode::Special {
                    special: Special::Fifo,
                    mode: 0o644,
                    rdev: 0,
                };
                fs.make(d, "x", fifo).await.map(drop)
            }
            Change::RenameIn => fs.rename(e, "x", d, "x").await,
            Change::RenameOut => fs.rename(d, "x", e, "x").await,
            Change::Unlink => fs.unlink(d, "x", false).await,
            Change::Rmdir => fs.unlink(d, "x", true).await,
        }
    }
}

impl Answer {
    /// Whether the request is the one whose reply A waits for.
    fn picks(self, m: &Message) -> bool {
        match (self, m) {
            (Answer::Walk, Message::Twalk(w)) => w.wnames.last().is_some_and(|n| n == "x"),
            (Answer::Listing | Answer::Complete, Message::Treaddir(_)) => true,
            (Answer::DirAttr, Message::Tgetattr(_)) => true,
            _ => false,
        }
    }

    /// A's request, whose answer is then late. Its own result is not checked: it was
    /// true when the server gave it.
    async fn ask(self, ns: &Namespace) {
        match self {
            Answer::Walk => drop(ns.resolve("/d/x", false).await),
            Answer::Listing => drop(ns.readdir("/d").await),
            // The second lookup in /d reads its listing (complete_dirs=1).
            Answer::Complete => drop(ns.resolve("/d/y", false).await),
            Answer::DirAttr => drop(ns.getattr("/d", false).await),
        }
    }

    fn applies_to(self, spec: &str) -> bool {
        self != Answer::Complete || !spec.contains("complete_dirs=off")
    }
}

#[derive(Clone)]
struct Nodes {
    d: Node,
    e: Node,
    f: Node,
}

/// Everything a guest could ask about what the change touched, as `ns` answers it.
async fn answers(ns: &Namespace) -> Vec<String> {
    let mut out = Vec::new();
    for path in ["/d/x", "/e/x"] {
        let what = ns
            .resolve(path, false)
            .await
            .map(|l| (l.node.id, l.node.kind));
        out.push(format!("{path}: {what:?}"));
    }
    for dir in ["/d", "/e"] {
        let mut names: Vec<(String, Kind)> = match ns.readdir(dir).await {
            Ok(entries) => entries.into_iter().map(|e| (e.name, e.kind)).collect(),
            Err(e) => vec![(format!("{e:?}"), Kind::File)],
        };
        names.sort_by(|a, b| a.0.cmp(&b.0));
        out.push(format!("{dir} lists {names:?}"));
        let a = ns.getattr(dir, false).await.unwrap();
        out.push(format!(
            "{dir}: nlink {} mtime {:?} ctime {:?}",
            a.nlink, a.mtime, a.ctime
        ));
    }
    out
}

/// One interleaving on a mount with `spec`: A's `answer` held while B makes `change`;
/// what the mount (and a later one, from its store) answers wrongly afterwards.
async fn interleave(spec: &str, change: Change, answer: Answer) -> Vec<String> {
    let export = change.export();
    let server = TestServer::tcp(export.path());
    let gate = ReplyGate::start(&server.addr).await;
    let via_gate = Gated {
        addr: gate.addr.clone(),
    };
    let (ns, fs) = mount(&via_gate, spec).await;
    let (truth, _) = mount(&server, "cache=none").await;
    let node = |path: &'static str| {
        let ns = &ns;
        async move { ns.resolve(path, false).await.unwrap().node }
    };
    let nodes = Nodes {
        d: node("/d").await,
        e: node("/e").await,
        f: node("/f").await,
    };
    if answer == Answer::Complete {
        // The first lookup in /d walks; the second reads the listing.
        ns.resolve("/d/keep", false).await.unwrap();
    }
    let case = format!("{spec}: {answer:?} late over {change:?}");

    let mut held = gate.hold_next(move |m| answer.picks(m));
    let a = {
        let ns = ns.clone();
        tokio::spawn(async move { answer.ask(&ns).await })
    };
    // B starts only once A's request has been answered and its reply is held: started
    // together, B's change could win and A be answered from what B recorded, without
    // asking the server at all.
    tokio::time::timeout(TIMEOUT, held.reply_held())
        .await
        .unwrap_or_else(|_| panic!("{case}: A's request never reached the server"));
    let b = tokio::spawn(change.apply(fs.clone(), nodes));
    if change.looks_up_first() && answer == Answer::Walk {
        // B's own lookup of /d/x joins A's walk on the wire and waits for its reply.
        held.release();
        b.await.unwrap().unwrap_or_else(|e| panic!("{case}: {e:?}"));
    } else {
        let done = tokio::time::timeout(TIMEOUT, b).await;
        let changed = done.unwrap_or_else(|_| panic!("{case}: B waited for A's late reply"));
        changed.unwrap().unwrap_or_else(|e| panic!("{case}: {e:?}"));
        held.release();
    }
    finish(&case, spec, &ns, &fs, &truth, &server, a).await
}

async fn finish(
    case: &str,
    spec: &str,
    ns: &Namespace,
    fs: &Arc<NinepFs>,
    truth: &Namespace,
    server: &TestServer,
    a: tokio::task::JoinHandle<()>,
) -> Vec<String> {
    tokio::time::timeout(TIMEOUT, a)
        .await
        .unwrap_or_else(|_| panic!("{case}: A never finished"))
        .unwrap();
    let want = answers(truth).await;
    let wrong = |got: Vec<String>, whose: &str| {
        got.into_iter()
            .zip(&want)
            .filter(|(got, want)| got != *want)
            .map(|(got, want)| format!("{case}{whose}: {got}, the server says {want}"))
            .collect::<Vec<_>>()
    };
    let mut out = wrong(answers(ns).await, "");
    if spec.contains("fscache") {
        // What the mount kept on disk, taken in by a later mount, says the same.
        fs.persist().unwrap();
        let (later, _) = mount(server, spec).await;
        out.extend(wrong(
            answers(&later).await,
            " (a later mount, from the store)",
        ));
    }
    out
}

const TIMEOUT: Duration = Duration::from_secs(10);

/// A mount's way to the server through the gate.
struct Gated {
    addr: wasm9p_proto::Addr,
}

impl Serving for Gated {
    fn addr(&self) -> wasm9p_proto::Addr {
        self.addr.clone()
    }
    fn aname(&self) -> String {
        String::new()
    }
}

async fn every_interleaving(spec: &str) {
    let mut wrong = Vec::new();
    let mut cases = 0;
    for change in CHANGES {
        for answer in ANSWERS.into_iter().filter(|a| a.applies_to(spec)) {
            wrong.extend(interleave(spec, change, answer).await);
            cases += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "{} wrong answers after {cases} interleavings:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_never_undo_a_change_without_complete_listings() {
    every_interleaving("cache=loose,complete_dirs=off").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_never_undo_a_change_with_complete_listings() {
    every_interleaving("cache=loose").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answers_never_undo_a_change_in_memory_or_on_disk_with_fscache() {
    let store = tempfile::tempdir().unwrap();
    every_interleaving(&format!(
        "cache=fscache,cachetag=late,fscache_dir={}",
        store.path().display()
    ))
    .await;
}

/// The case as users met it: two guests on one loose mount over tcp; A stats a name
/// that is missing, its walk's reply is late, B creates the name meanwhile (through
/// the namespace, as `open(O_CREAT)` does), and A's stat afterwards must find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_created_while_a_lookup_of_it_is_late_is_found_afterwards() {
    let export = Tree::build(&[Tree::Dir("d", vec![Tree::file("keep", "kept\n")])]);
    let server = TestServer::tcp(export.path());
    let gate = ReplyGate::start(&server.addr).await;
    let (ns, _fs) = mount(
        &Gated {
            addr: gate.addr.clone(),
        },
        "cache=loose",
    )
    .await;
    ns.resolve("/d", false).await.unwrap();
    let mut held = gate
        .hold_next(|m| matches!(m, Message::Twalk(w) if w.wnames.last().is_some_and(|n| n == "x")));
    let a = {
        let ns = ns.clone();
        tokio::spawn(async move { ns.getattr("/d/x", true).await })
    };
    tokio::time::timeout(TIMEOUT, held.reply_held())
        .await
        .unwrap();
    tokio::time::timeout(TIMEOUT, ns.create("/d/x", 0o644, true))
        .await
        .expect("the create waited for the late walk")
        .unwrap();
    held.release();
    assert_eq!(
        a.await.unwrap().unwrap_err(),
        Errno::ENOENT,
        "A's own answer"
    );
    let attr = ns.getattr("/d/x", true).await.expect("the created file");
    assert_eq!(attr.size, 0);
}

/// `cache=fscache`: a directory's record on disk, confirmed by the burst of probes a
/// mount sends at its first use, is taken in when a name in the directory is first
/// looked up. If the directory changed through the mount in between, the
/// confirmation is older than the change and the record must not land over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_confirmed_before_a_change_is_not_taken_in_after_it() {
    // A record of names (negative ones among them), and a complete listing.
    for listing in ["complete_dirs=off", "complete_dirs=1"] {
        let export = Tree::build(&[Tree::Dir("d", vec![Tree::file("keep", "kept\n")])]);
        let server = TestServer::tcp(export.path());
        let store = tempfile::tempdir().unwrap();
        let spec = format!(
            "cache=fscache,{listing},cachetag=t,fscache_dir={}",
            store.path().display()
        );
        {
            let (ns, fs) = mount(&server, &spec).await;
            for name in ["x", "y"] {
                let missing = ns.resolve(&format!("/d/{name}"), false).await;
                assert_eq!(missing.err(), Some(Errno::ENOENT));
            }
            ns.resolve("/d/keep", false).await.unwrap();
            fs.persist().unwrap();
        }
        let (ns, fs) = mount(&server, &spec).await;
        // The burst confirms /d's record (x missing); it is not taken in yet.
        let d = ns.resolve("/d", false).await.unwrap().node;
        assert!(
            fs.cache_stats().validated_ahead > 0,
            "{:?}",
            fs.cache_stats()
        );
        let file = NewNode::File {
            mode: 0o644,
            exclusive: true,
        };
        fs.make(&d, "x", file).await.unwrap();
        // A lookup of another name takes the record in.
        assert_eq!(ns.resolve("/d/y", false).await.err(), Some(Errno::ENOENT));
        let x = ns.resolve("/d/x", false).await;
        assert!(
            x.is_ok(),
            "{listing}: the file created is hidden: {:?}",
            x.err()
        );
        assert_eq!(sorted_names(&ns, "/d").await, ["keep", "x"], "{listing}");
    }
}
