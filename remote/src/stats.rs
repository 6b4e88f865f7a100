//! A worker's `--stats`: one JSON line per action (an [`ActionStats`], its serde
//! names the keys), and the [`Totals`] when the worker stops.
//!
//! Each figure is defined once: an action's in [`ActionStats`] (the guest's
//! namespace's in [`GuestCounts`]), counted where it happens (the action's steps, the
//! guest's mount), summed in [`Totals::add`] and written by [`StatsFile`].

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;

use crate::action::{ActionStats, GuestCounts};

/// The sums over a worker's actions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    /// Actions run.
    pub actions: u64,
    /// Of those, the ones reported with a status other than OK.
    pub failed: u64,
    /// Blobs fetched from the CAS.
    pub blobs_fetched: u64,
    /// Their bytes.
    pub bytes_fetched: u64,
    /// Blobs the content store already had.
    pub store_hits: u64,
    /// Blobs prefetched for the actions' access profiles.
    pub prefetched_blobs: u64,
    /// What the guests' namespaces counted.
    #[serde(flatten)]
    pub guest: GuestCounts,
    /// Milliseconds running guests.
    pub run_ms: u64,
}

impl Totals {
    /// Counts the action `took` in.
    pub fn add(&mut self, took: &ActionStats) {
        self.actions += 1;
        self.failed += u64::from(took.status != 0);
        self.blobs_fetched += took.blobs_fetched;
        self.bytes_fetched += took.bytes_fetched;
        self.store_hits += took.store_hits;
        self.prefetched_blobs += took.prefetched_blobs;
        self.guest += took.guest;
        self.run_ms += took.run_ms;
    }
}

/// The `--stats` file: `{"action": {...}}` lines as actions end, `{"totals": {...}}`
/// at [`StatsFile::totals`].
pub struct StatsFile {
    file: Mutex<std::fs::File>,
    totals: Mutex<Totals>,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Line<'a> {
    Action(&'a ActionStats),
    Totals(&'a Totals),
}

impl StatsFile {
    /// A new (truncated) file at `path`.
    pub fn create(path: &Path) -> std::io::Result<StatsFile> {
        Ok(StatsFile {
            file: Mutex::new(std::fs::File::create(path)?),
            totals: Mutex::default(),
        })
    }

    /// Writes the line of the action `took` and counts it in the totals.
    pub fn action(&self, took: &ActionStats) {
        self.totals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .add(took);
        self.line(&Line::Action(took));
    }

    /// Writes the totals so far (the worker is stopping) and gives them.
    pub fn totals(&self) -> Totals {
        let totals = self
            .totals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        self.line(&Line::Totals(&totals));
        totals
    }

    fn line(&self, line: &Line<'_>) {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(json) = serde_json::to_string(line) {
            let _ = writeln!(file, "{json}");
            let _ = file.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn each_action_is_a_line_and_the_totals_sum_them_under_the_same_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stats.jsonl");
        let stats = StatsFile::create(&path).unwrap();
        let took = |lease: &str, status, rpcs| ActionStats {
            lease: lease.into(),
            status,
            exit_code: Some(0),
            blobs_fetched: 3,
            bytes_fetched: 4096,
            guest: GuestCounts {
                rpcs_9p: rpcs,
                reads_9p: 2,
                shared_page_hits: 5,
                shared_metadata_hits: 7,
            },
            run_ms: 10,
            ..ActionStats::default()
        };
        stats.action(&took("a", 0, 100));
        stats.action(&took("b", 9, 50));
        let totals = stats.totals();
        assert_eq!((totals.actions, totals.failed), (2, 1));
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        let first = &lines[0]["action"];
        assert_eq!(first["lease"], "a");
        assert_eq!(first["rpc_9p"], 100);
        assert_eq!(first["read_9p"], 2);
        assert_eq!(first["shared_metadata_hits"], 7);
        assert_eq!(first["exit_code"], 0);
        let sums = &lines[2]["totals"];
        assert_eq!(sums["actions"], 2);
        assert_eq!(sums["failed"], 1);
        assert_eq!(sums["rpc_9p"], 150);
        assert_eq!(sums["bytes_fetched"], 8192);
        assert_eq!(sums["shared_page_hits"], 10);
        assert_eq!(sums["run_ms"], 20);
    }
}
