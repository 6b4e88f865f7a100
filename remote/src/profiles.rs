//! Access profiles: which files of their input roots the actions of one kind read, so
//! that the next action of that kind fetches them at once, before its guest asks
//! (Buildbarn's lazy workers keep a "File System Access Cache" for the same reason).
//!
//! - **Kind** ([`ProfileKey::of`]). Actions are alike when they run the same program
//!   (the digest of `arguments[0]`), with the same arguments once those naming files
//!   are left out, on an input root with the same top-level names. An argument names a
//!   file when it is a file of the input root (a source), or holds the path of one of
//!   the outputs (`-o x.o`, `-MF x.d`, `-frandom-seed=x.o`). Two compiles in one package
//!   with the same flags are alike; a compile and a link are not.
//! - **Recorded** after a guest ran to its exit: the paths of the input root's files it
//!   read, in the order it first read them, replacing what the kind had (the latest
//!   action is the best guess at the next).
//! - **Never trusted.** A profile is a list of paths, nothing more: the next action
//!   looks each one up in its own tree (see `prefetch`). A path that is gone is
//!   skipped, a file whose bytes changed is fetched as it is now, and a file the guest
//!   reads that the profile missed is fetched when read, as ever.
//! - **Bounded.** At most [`MAX_PATHS`] paths and [`MAX_PROFILE_BYTES`] bytes each,
//!   at most [`MAX_PROFILES`] profiles (past it, those written longest ago go). Each is
//!   a file of the profile directory named by its key, written under a temporary name
//!   and renamed into place; a file that does not parse is no profile.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sha2::Digest as _;

use crate::apis::v2;
use crate::tree::{InputTree, TreeNode};
use crate::Digest;

/// Most paths a profile keeps.
pub const MAX_PATHS: usize = 16_384;
/// Most bytes of a profile's file.
pub const MAX_PROFILE_BYTES: usize = 2 << 20;
/// Most profiles kept.
pub const MAX_PROFILES: usize = 2_048;

/// The first line of a profile's file; the paths follow, each ended by a NUL (a name
/// in an input root may hold a newline, never a NUL).
const MAGIC: &[u8] = b"wasm9p access profile 1\n";

/// What makes actions alike (see the module docs): a SHA-256, named in hex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProfileKey([u8; 32]);

impl ProfileKey {
    /// The kind of the action that runs `program` with `command` (whose working
    /// directory is `wd`) on `tree`.
    pub fn of(program: Digest, command: &v2::Command, wd: &str, tree: &InputTree) -> ProfileKey {
        #[allow(deprecated)] // output_files and output_directories: older clients send them
        let outputs: Vec<&str> = command
            .output_paths
            .iter()
            .chain(&command.output_files)
            .chain(&command.output_directories)
            .map(String::as_str)
            .filter(|o| !o.is_empty())
            .collect();
        let names_a_file = |arg: &str| {
            outputs.iter().any(|o| arg.contains(o))
                || tree
                    .resolve(wd, arg)
                    .is_some_and(|i| matches!(tree.node(i).0, TreeNode::File { .. }))
        };
        let mut h = sha2::Sha256::new();
        let mut field = |bytes: &[u8]| {
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field(MAGIC);
        field(program.hex().as_bytes());
        field(&program.size().to_le_bytes());
        for arg in command.arguments.iter().skip(1) {
            if !names_a_file(arg) {
                field(arg.as_bytes());
            }
        }
        field(b"/");
        if let TreeNode::Dir { entries, .. } = &tree.node(tree.root()).0 {
            for name in entries.keys() {
                field(name.as_bytes());
            }
        }
        ProfileKey(h.finalize().into())
    }

    /// The key in hex: its file's name.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// The worker's profiles, in a directory of their own (see the module docs).
#[derive(Debug)]
pub struct Profiles {
    dir: PathBuf,
    /// Profiles in the directory (about: a race may count one twice).
    count: AtomicUsize,
    /// Names temporary files apart.
    next_tmp: AtomicU64,
}

impl Profiles {
    /// The profiles in `dir` (made if missing).
    pub fn open(dir: &Path) -> std::io::Result<Profiles> {
        std::fs::create_dir_all(dir)?;
        let mut count = 0;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            match entry.file_name().to_str() {
                Some(name) if is_key(name) => count += 1,
                // A temporary file a killed worker left.
                _ => {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(Profiles {
            dir: dir.to_owned(),
            count: AtomicUsize::new(count),
            next_tmp: AtomicU64::new(0),
        })
    }

    /// The paths recorded for `key`: none when there is no profile, or its file does
    /// not parse.
    pub fn load(&self, key: &ProfileKey) -> Vec<String> {
        let Ok(bytes) = std::fs::read(self.dir.join(key.hex())) else {
            return Vec::new();
        };
        parse(&bytes).unwrap_or_default()
    }

    /// Records `paths` (as read, first first) for `key`, within the bounds; an error
    /// only loses the profile.
    pub fn save(&self, key: &ProfileKey, paths: &[String]) -> std::io::Result<()> {
        let mut bytes = MAGIC.to_vec();
        for path in paths.iter().take(MAX_PATHS) {
            if path.contains('\0') || bytes.len() + path.len() + 1 > MAX_PROFILE_BYTES {
                continue;
            }
            bytes.extend_from_slice(path.as_bytes());
            bytes.push(0);
        }
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(".{}-{n}", std::process::id()));
        let path = self.dir.join(key.hex());
        let new = !path.exists();
        let written = std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
            return written;
        }
        if new && self.count.fetch_add(1, Ordering::Relaxed) + 1 > MAX_PROFILES {
            self.make_room();
        }
        Ok(())
    }

    /// Removes the profiles written longest ago, down to nine tenths of the bound.
    fn make_room(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut found: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(is_key))
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        found.sort();
        let keep = MAX_PROFILES * 9 / 10;
        let gone = found.len().saturating_sub(keep);
        for (_, path) in &found[..gone] {
            let _ = std::fs::remove_file(path);
        }
        self.count.store(found.len() - gone, Ordering::Relaxed);
    }
}

/// Whether `name` is a profile's file name (a key in hex).
fn is_key(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The paths of a profile's file, or `None` when it is not one.
fn parse(bytes: &[u8]) -> Option<Vec<String>> {
    if bytes.len() > MAX_PROFILE_BYTES {
        return None;
    }
    let body = bytes.strip_prefix(MAGIC)?;
    let (body, last) = body.split_at(body.len().checked_sub(1)?);
    if last != [0] {
        return None;
    }
    body.split(|b| *b == 0)
        .take(MAX_PATHS)
        .map(|p| String::from_utf8(p.to_vec()).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn file(name: &str, bytes: &[u8]) -> v2::FileNode {
        v2::FileNode {
            name: name.into(),
            digest: Some(Digest::of(bytes).to_proto()),
            ..Default::default()
        }
    }

    /// A root with `src/` holding `files` and `include/` holding `a.h`.
    fn tree(files: &[(&str, &[u8])]) -> InputTree {
        let src = v2::Directory {
            files: files.iter().map(|(n, b)| file(n, b)).collect(),
            ..Default::default()
        };
        let include = v2::Directory {
            files: vec![file("a.h", b"int a;")],
            ..Default::default()
        };
        let digest = |d: &v2::Directory| Digest::of(&prost::Message::encode_to_vec(d));
        let root = v2::Directory {
            directories: vec![
                v2::DirectoryNode {
                    name: "include".into(),
                    digest: Some(digest(&include).to_proto()),
                },
                v2::DirectoryNode {
                    name: "src".into(),
                    digest: Some(digest(&src).to_proto()),
                },
            ],
            ..Default::default()
        };
        let all: HashMap<Digest, v2::Directory> = [src, include, root.clone()]
            .into_iter()
            .map(|d| (digest(&d), d))
            .collect();
        InputTree::build(digest(&root), &all).unwrap()
    }

    fn compile(source: &str, object: &str, flags: &[&str]) -> v2::Command {
        let mut arguments: Vec<String> = vec!["clang.wasm".into(), "-c".into(), source.into()];
        arguments.extend(flags.iter().map(|f| f.to_string()));
        arguments.extend([
            "-o".into(),
            object.into(),
            format!("-frandom-seed={object}"),
        ]);
        v2::Command {
            arguments,
            output_paths: vec![object.into()],
            ..Default::default()
        }
    }

    #[test]
    fn compiles_with_the_same_flags_are_alike_whatever_their_files_and_others_are_not() {
        let clang = Digest::of(b"clang");
        let t = tree(&[("a.c", b"a"), ("b.c", b"b")]);
        let key = |c: &v2::Command, t: &InputTree| ProfileKey::of(clang, c, "", t);
        let a = key(&compile("src/a.c", "out/a.o", &["-Iinclude"]), &t);
        let b = key(&compile("src/b.c", "out/b.o", &["-Iinclude"]), &t);
        assert_eq!(a, b, "two compiles of one package");
        // Another source of the same name and other bytes: the same kind.
        let other = tree(&[("a.c", b"changed"), ("b.c", b"b")]);
        assert_eq!(
            a,
            key(&compile("src/a.c", "out/a.o", &["-Iinclude"]), &other)
        );
        // Other flags, another program, other top-level names: other kinds.
        assert_ne!(a, key(&compile("src/a.c", "out/a.o", &["-O2"]), &t));
        assert_ne!(
            a,
            ProfileKey::of(
                Digest::of(b"ld"),
                &compile("src/a.c", "out/a.o", &["-Iinclude"]),
                "",
                &t
            )
        );
        let mut link = compile("src/a.c", "out/a.o", &["-Iinclude"]);
        link.arguments[1] = "-shared".into();
        assert_ne!(a, key(&link, &t));
        // A name that is not a file of the root is an argument like any other.
        assert_ne!(
            a,
            key(&compile("src/missing.c", "out/a.o", &["-Iinclude"]), &t)
        );
    }

    #[test]
    fn a_profile_keeps_its_paths_in_order_and_within_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let profiles = Profiles::open(dir.path()).unwrap();
        let key = ProfileKey([7; 32]);
        assert!(profiles.load(&key).is_empty());
        let paths: Vec<String> = vec!["src/b.c".into(), "include/a\nb.h".into(), "x".into()];
        profiles.save(&key, &paths).unwrap();
        assert_eq!(profiles.load(&key), paths);
        // Reopened, as by the next worker process.
        let again = Profiles::open(dir.path()).unwrap();
        assert_eq!(again.load(&key), paths);
        // Past the bounds: the first MAX_PATHS, and no path with a NUL.
        let many: Vec<String> = (0..MAX_PATHS + 10).map(|i| format!("f{i}")).collect();
        profiles.save(&key, &many).unwrap();
        assert_eq!(profiles.load(&key), many[..MAX_PATHS]);
        profiles.save(&key, &["a\0b".into(), "ok".into()]).unwrap();
        assert_eq!(profiles.load(&key), ["ok"]);
        let long = vec!["p".repeat(MAX_PROFILE_BYTES)];
        profiles.save(&key, &long).unwrap();
        assert!(profiles.load(&key).is_empty());
    }

    #[test]
    fn a_file_that_is_no_profile_gives_no_paths() {
        let dir = tempfile::tempdir().unwrap();
        let profiles = Profiles::open(dir.path()).unwrap();
        let key = ProfileKey([1; 32]);
        let at = dir.path().join(key.hex());
        for junk in [
            &b""[..],
            b"garbage\0",
            b"wasm9p access profile 1\nno end",
            b"wasm9p access profile 1\n\xff\xfe\0",
            b"wasm9p access profile 2\nx\0",
        ] {
            std::fs::write(&at, junk).unwrap();
            assert!(profiles.load(&key).is_empty(), "{junk:?}");
        }
        std::fs::write(&at, b"wasm9p access profile 1\n").unwrap();
        assert!(profiles.load(&key).is_empty());
    }

    #[test]
    fn past_the_most_profiles_those_written_longest_ago_go() {
        let dir = tempfile::tempdir().unwrap();
        // Two thirds of the bound there already, one of them old, and a temporary
        // file a killed worker left.
        let old = ProfileKey([0xaa; 32]);
        std::fs::write(dir.path().join(old.hex()), MAGIC).unwrap();
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(dir.path().join(old.hex()))
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
        std::fs::write(dir.path().join(".123-0"), b"half").unwrap();
        let profiles = Profiles::open(dir.path()).unwrap();
        assert!(!dir.path().join(".123-0").exists());
        for i in 0..MAX_PROFILES as u32 {
            let mut key = [0u8; 32];
            key[..4].copy_from_slice(&i.to_le_bytes());
            profiles.save(&ProfileKey(key), &["f".into()]).unwrap();
        }
        let left = std::fs::read_dir(dir.path()).unwrap().count();
        assert!(left <= MAX_PROFILES, "{left}");
        assert!(left >= MAX_PROFILES * 9 / 10, "{left}");
        assert!(profiles.load(&old).is_empty(), "the oldest went first");
    }
}
