//! Which records to confirm at once, ahead of use: the paths a mount probes in one
//! burst the first time it reaches for its store (see `backend::ninep::store`).
//!
//! A probe confirms a whole path (every directory on the way, and what the path ends
//! at), so the fewest probes that confirm every record reachable from the root are
//! one per file or symlink with a record, and one per directory with a record that has
//! none of those below it. Records are reached by name from the root's record,
//! directory record by directory record; a record not reachable that way (its parent
//! directory has no record, or changed) is confirmed when it is used, as before.
//!
//! The most recently used come first and there are at most `max`: a store shared by
//! many builds of one export may know far more than this process will use. Paths
//! longer than [`MAX_NAMES`] names are left to be confirmed on use (a probe is one
//! Twalk, at most 16 names with the probe's own).

use std::collections::HashSet;

use wasm9p_proto::Qid;

use super::Records;

/// The longest path probed ahead, in names (the probe walks one more).
pub const MAX_NAMES: usize = 15;

/// A path to probe, and the qid its parent directory's record gives for its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The names from the root.
    pub names: Vec<String>,
    /// The qid recorded for the last name.
    pub qid: Qid,
    /// When the record it confirms was last used (Unix seconds).
    pub used: u64,
}

/// The probes that confirm the records reachable from directory `root`, most recently
/// used first, at most `max`.
pub fn probes(records: &Records, root: u64, max: usize) -> Vec<Probe> {
    let mut out = Vec::new();
    let mut seen = HashSet::from([root]);
    below(records, root, &mut Vec::new(), &mut seen, &mut out);
    out.sort_by(|a, b| b.used.cmp(&a.used).then(a.names.cmp(&b.names)));
    out.truncate(max);
    out
}

/// Adds the probes below directory `dir` (at `path`); whether it added any.
fn below(
    records: &Records,
    dir: u64,
    path: &mut Vec<String>,
    seen: &mut HashSet<u64>,
    out: &mut Vec<Probe>,
) -> bool {
    let Some(record) = records.dirs.get(&dir) else {
        return false;
    };
    if path.len() == MAX_NAMES {
        return false;
    }
    let mut names: Vec<(&str, Qid)> = record
        .names
        .iter()
        .filter_map(|(name, qid)| Some((name.as_ref(), (*qid)?)))
        .collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    let mut added = false;
    for (name, qid) in names {
        path.push(name.to_owned());
        if let Some(sub) = records.dirs.get(&qid.path) {
            // A directory is probed once, by its first path (a server may show one
            // directory under two names).
            if seen.insert(qid.path) {
                if !below(records, qid.path, path, seen, out) {
                    out.push(Probe {
                        names: path.clone(),
                        qid,
                        used: sub.used,
                    });
                }
                added = true;
            }
        } else if let Some(used) = records
            .files
            .get(&qid.path)
            .map(|f| f.used)
            .or_else(|| records.links.get(&qid.path).map(|l| l.used))
        {
            out.push(Probe {
                names: path.clone(),
                qid,
                used,
            });
            added = true;
        }
        path.pop();
    }
    added
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fscache::{DirRecord, FileRecord, LinkRecord};
    use wasm9p_proto::consts::qid;
    use wasm9p_proto::Rgetattr;

    fn q(ty: u8, path: u64) -> Qid {
        Qid {
            ty,
            version: 1,
            path,
        }
    }

    fn dir(used: u64, names: &[(&str, Option<Qid>)]) -> DirRecord {
        DirRecord {
            version: 1,
            names: names.iter().map(|(n, q)| (Box::from(*n), *q)).collect(),
            complete: false,
            used,
        }
    }

    fn file(path: u64, used: u64) -> FileRecord {
        FileRecord {
            attr: Rgetattr {
                qid: q(qid::FILE, path),
                ..Rgetattr::default()
            },
            readable: true,
            used,
        }
    }

    fn names(probes: &[Probe]) -> Vec<String> {
        probes.iter().map(|p| p.names.join("/")).collect()
    }

    /// root(1) { inc(2) { a.h(10), gone.h: missing, listed.h(11, no record) },
    /// sys(3) { link.h(12, a symlink) }, empty(4) {}, other(5: no record) }
    fn store() -> Records {
        let mut r = Records::default();
        r.dirs.insert(
            1,
            dir(
                5,
                &[
                    ("inc", Some(q(qid::DIR, 2))),
                    ("sys", Some(q(qid::DIR, 3))),
                    ("empty", Some(q(qid::DIR, 4))),
                    ("other", Some(q(qid::DIR, 5))),
                ],
            ),
        );
        r.dirs.insert(
            2,
            dir(
                5,
                &[
                    ("a.h", Some(q(qid::FILE, 10))),
                    ("gone.h", None),
                    ("listed.h", Some(q(qid::FILE, 11))),
                ],
            ),
        );
        r.dirs
            .insert(3, dir(5, &[("link.h", Some(q(qid::SYMLINK, 12)))]));
        r.dirs.insert(4, dir(7, &[("missing.h", None)]));
        r.files.insert(10, file(10, 6));
        r.links.insert(
            12,
            LinkRecord {
                version: 1,
                target: "../inc/a.h".into(),
                used: 5,
            },
        );
        r
    }

    #[test]
    fn one_probe_per_file_link_and_directory_with_nothing_below_most_recent_first() {
        let probes = probes(&store(), 1, 100);
        // empty/ (used 7) and a.h (6) first; inc/ and sys/ are confirmed on the way to
        // what is below them; listed.h has no record of its own, other/ no record.
        assert_eq!(names(&probes), ["empty", "inc/a.h", "sys/link.h"]);
        assert_eq!(probes[1].qid, q(qid::FILE, 10));
        assert_eq!(probes[2].qid, q(qid::SYMLINK, 12));
    }

    #[test]
    fn at_most_max_probes_are_made_the_most_recently_used() {
        assert_eq!(names(&probes(&store(), 1, 2)), ["empty", "inc/a.h"]);
        assert!(probes(&store(), 1, 0).is_empty());
    }

    #[test]
    fn nothing_is_probed_without_a_record_of_the_root() {
        assert!(probes(&store(), 99, 100).is_empty());
    }

    #[test]
    fn paths_too_long_for_one_walk_are_left_out() {
        let mut r = Records::default();
        // A chain of directories 1 -> 2 -> ... -> 20, each with one file.
        for d in 1..=20u64 {
            let mut names = vec![("f", Some(q(qid::FILE, 100 + d)))];
            if d < 20 {
                names.push(("d", Some(q(qid::DIR, d + 1))));
            }
            r.dirs.insert(d, dir(1, &names));
            r.files.insert(100 + d, file(100 + d, 1));
        }
        let probes = probes(&r, 1, 100);
        // The files of directories 1 to 15, and directory 16 itself (its names would
        // be a 16th).
        assert_eq!(probes.len(), MAX_NAMES + 1);
        assert!(probes.iter().all(|p| p.names.len() <= MAX_NAMES));
        assert!(probes.iter().any(|p| p.qid == q(qid::DIR, 16)));
    }

    #[test]
    fn a_directory_shown_under_two_names_is_probed_once() {
        let mut r = Records::default();
        r.dirs.insert(
            1,
            dir(
                1,
                &[("a", Some(q(qid::DIR, 2))), ("b", Some(q(qid::DIR, 3)))],
            ),
        );
        // 2 holds a file; 3 shows 2 again, and the root (a loop).
        r.dirs.insert(2, dir(1, &[("f", Some(q(qid::FILE, 10)))]));
        r.dirs.insert(
            3,
            dir(
                1,
                &[
                    ("again", Some(q(qid::DIR, 2))),
                    ("up", Some(q(qid::DIR, 1))),
                ],
            ),
        );
        r.files.insert(10, file(10, 1));
        // 3 has nothing below it of its own: it is probed itself.
        assert_eq!(names(&probes(&r, 1, 100)), ["a/f", "b"]);
    }
}
