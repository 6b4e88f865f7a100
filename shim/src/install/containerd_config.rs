//! The change the installer makes to containerd's `config.toml`, as text in and text
//! out: what is there stays there, comments and order included, and only the runtime
//! tables it needs are added or taken away.
//!
//! Where the runtimes live depends on the file's `version`:
//!
//! | `version` | containerd | the CRI plugin's table |
//! |---|---|---|
//! | none (a file with settings) | 1.x | `plugins.cri` |
//! | 2 | 1.x, 2.x | `plugins."io.containerd.grpc.v1.cri"` |
//! | 3 | 2.x | `plugins."io.containerd.cri.v1.runtime"` |
//!
//! A file with nothing in it (or none at all) becomes a version 2 file, which every
//! containerd from 1.5 on reads.
//!
//! **runc is kept.** containerd's built-in configuration has one runtime, runc, the
//! default (`default_runtime_name`). A `runtimes` table in the file replaces the
//! built-in one whole: a file that names only another runtime has no runc, and
//! containerd's CRI plugin then fails to load ("no corresponding runtime configured in
//! `containerd.runtimes` for `containerd` `default_runtime_name = "runc"`"), so the node
//! runs no pod at all. So when the file does not already name the default runtime,
//! and that is runc, the installer writes runc in as containerd's built-in
//! configuration has it (`runtime_type = "io.containerd.runc.v2"`, runc's own defaults
//! for the rest), beside its own runtime.
//!
//! ```
//! use wasm9p_shim::install::containerd_config::{add_runtime, RUNTIME_NAME};
//! let debian = "version = 2\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n";
//! let edit = add_runtime(debian).unwrap();
//! assert!(edit.text.contains("runtimes.runc]"));
//! assert!(edit.text.contains(&format!("runtimes.{RUNTIME_NAME}]")));
//! // Once is enough: a second install changes nothing.
//! assert!(add_runtime(&edit.text).unwrap().changes.is_empty());
//! ```

use toml_edit::{Array, DocumentMut, Item, Table, TableLike, Value};

/// The runtime's handler name (a RuntimeClass's `handler`).
pub const RUNTIME_NAME: &str = crate::NAME;

/// Its `runtime_type`, which makes containerd start `containerd-shim-wasm9p-v1`.
pub const RUNTIME_TYPE: &str = "io.containerd.wasm9p.v1";

/// The annotations containerd passes on to the shim from pods and containers: the
/// mounts (`wasm9p.io/mounts`) and the per-pod HTTP limits (`wasm9p.io/http`).
pub const ANNOTATIONS: &str = "wasm9p.io/*";

/// runc's `runtime_type`, as containerd's built-in configuration has it.
const RUNC_TYPE: &str = "io.containerd.runc.v2";

/// A changed configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The file's new text.
    pub text: String,
    /// What changed, a line each; empty when nothing did (`text` is then the old text).
    pub changes: Vec<String>,
}

/// The file with the runtime added (see the module docs); an error is one line.
pub fn add_runtime(text: &str) -> Result<Edit, String> {
    let mut doc = parse(text)?;
    let mut changes = Vec::new();
    let version = version_of(&mut doc, &mut changes)?;
    let cri = cri_path(version);
    let default_name = default_runtime(&doc, &cri)?;
    let runtimes_path: Vec<&str> = cri
        .iter()
        .copied()
        .chain(["containerd", "runtimes"])
        .collect();
    let shown = shown_path(&runtimes_path);
    let runtimes = table_at(doc.as_item_mut(), &runtimes_path)?;
    if !runtimes
        .as_table_like()
        .is_some_and(|t| t.contains_key(&default_name))
    {
        if default_name == "runc" {
            let runc = child(runtimes, "runc", false).and_then(Item::as_table_like_mut);
            let runc = runc.ok_or_else(|| format!("{shown}.runc is not a table"))?;
            runc.insert("runtime_type", toml_edit::value(RUNC_TYPE));
            changes.push(format!(
                "added {shown}.runc (containerd's default runtime, which a runtimes \
                 table without it would lose)"
            ));
        } else {
            changes.push(format!(
                "note: the default runtime {default_name:?} is not in {shown}; \
                 containerd's CRI plugin will not load until it is"
            ));
        }
    }
    let existed = runtimes
        .as_table_like()
        .is_some_and(|t| t.contains_key(RUNTIME_NAME));
    let ours = child(runtimes, RUNTIME_NAME, false).and_then(Item::as_table_like_mut);
    let ours = ours.ok_or_else(|| format!("{shown}.{RUNTIME_NAME} is not a table"))?;
    let mut changed = Vec::new();
    if ours.get("runtime_type").and_then(Item::as_str) != Some(RUNTIME_TYPE) {
        ours.insert("runtime_type", toml_edit::value(RUNTIME_TYPE));
        indent_like_siblings(ours, "runtime_type");
        changed.push("runtime_type");
    }
    for key in ["pod_annotations", "container_annotations"] {
        if add_to_array(ours, key, ANNOTATIONS)? {
            changed.push(key);
        }
    }
    if !existed {
        changes.push(format!(
            "added {shown}.{RUNTIME_NAME} (runtime_type {RUNTIME_TYPE:?}, pod and container \
             annotations {ANNOTATIONS:?})"
        ));
    } else if !changed.is_empty() {
        changes.push(format!(
            "set {} in {shown}.{RUNTIME_NAME}",
            changed.join(", ")
        ));
    }
    Ok(finish(text, doc, changes))
}

/// The file without the runtime: its table goes, nothing else does (runc, if the
/// installer wrote it, stays: it is what containerd runs without the file anyway).
pub fn remove_runtime(text: &str) -> Result<Edit, String> {
    let mut doc = parse(text)?;
    let mut ignored = Vec::new();
    let version = version_of(&mut doc, &mut ignored)?;
    let runtimes_path: Vec<&str> = cri_path(version)
        .iter()
        .copied()
        .chain(["containerd", "runtimes"])
        .collect();
    let mut changes = Vec::new();
    if let Some(runtimes) = lookup_mut(doc.as_table_mut(), &runtimes_path) {
        if runtimes.remove(RUNTIME_NAME).is_some() {
            changes.push(format!(
                "removed {}.{RUNTIME_NAME}",
                shown_path(&runtimes_path)
            ));
        }
    }
    Ok(finish(text, doc, changes))
}

/// The CRI plugin's key path for a file version.
fn cri_path(version: i64) -> Vec<&'static str> {
    match version {
        1 => vec!["plugins", "cri"],
        2 => vec!["plugins", "io.containerd.grpc.v1.cri"],
        _ => vec!["plugins", "io.containerd.cri.v1.runtime"],
    }
}

fn parse(text: &str) -> Result<DocumentMut, String> {
    text.parse::<DocumentMut>().map_err(|e| {
        let line = e
            .span()
            .map(|span| text[..span.start].matches('\n').count() + 1);
        let message = e.message().lines().next().unwrap_or_default().to_owned();
        match line {
            Some(line) => format!("containerd's config does not parse: line {line}: {message}"),
            None => format!("containerd's config does not parse: {message}"),
        }
    })
}

/// The file's version; a file with nothing in it is made version 2.
fn version_of(doc: &mut DocumentMut, changes: &mut Vec<String>) -> Result<i64, String> {
    match doc.get("version") {
        None if doc.as_table().is_empty() => {
            doc.insert("version", toml_edit::value(2));
            changes.push("set version = 2 (the file had no settings)".into());
            Ok(2)
        }
        None => Ok(1),
        Some(item) => match item.as_integer() {
            Some(version @ 1..=3) => Ok(version),
            _ => Err(format!(
                "containerd's config has version {}, not one this installer knows (1, 2 or 3)",
                item.to_string().trim()
            )),
        },
    }
}

/// The CRI plugin's default runtime's name.
fn default_runtime(doc: &DocumentMut, cri: &[&str]) -> Result<String, String> {
    let path: Vec<&str> = cri.iter().copied().chain(["containerd"]).collect();
    let Some(containerd) = lookup(doc.as_table(), &path) else {
        return Ok("runc".into());
    };
    match containerd.get("default_runtime_name") {
        None => Ok("runc".into()),
        Some(item) => item
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("{}.default_runtime_name is not a string", shown_path(&path))),
    }
}

fn lookup<'a>(mut table: &'a dyn TableLike, path: &[&str]) -> Option<&'a dyn TableLike> {
    for key in path {
        table = table.get(key)?.as_table_like()?;
    }
    Some(table)
}

fn lookup_mut<'a>(
    mut table: &'a mut dyn TableLike,
    path: &[&str],
) -> Option<&'a mut dyn TableLike> {
    for key in path {
        table = table.get_mut(key)?.as_table_like_mut()?;
    }
    Some(table)
}

/// The table at `path` under `item`, made where it is missing (as implicit tables,
/// which print no header of their own).
fn table_at<'a>(mut item: &'a mut Item, path: &[&str]) -> Result<&'a mut Item, String> {
    for (depth, key) in path.iter().enumerate() {
        item = child(item, key, true)
            .ok_or_else(|| format!("{} is not a table", shown_path(&path[..=depth])))?;
    }
    Ok(item)
}

/// The child table `key` of the table `parent`, made where it is missing: inside an
/// inline table as an inline table, elsewhere as a table (implicit, or with a header
/// of its own). `None` if either is not a table.
fn child<'a>(parent: &'a mut Item, key: &str, implicit: bool) -> Option<&'a mut Item> {
    let inline = parent.is_inline_table();
    let table = parent.as_table_like_mut()?;
    if !table.contains_key(key) {
        let made = if inline {
            Item::Value(Value::InlineTable(Default::default()))
        } else {
            let mut made = Table::new();
            made.set_implicit(implicit);
            Item::Table(made)
        };
        table.insert(key, made);
    }
    let item = table.get_mut(key)?;
    item.is_table_like().then_some(item)
}

/// Adds `entry` to the array of strings `key` (made if missing); whether it changed.
fn add_to_array(table: &mut dyn TableLike, key: &str, entry: &str) -> Result<bool, String> {
    match table.get_mut(key) {
        None => {
            let mut array = Array::new();
            array.push(entry);
            table.insert(key, Item::Value(Value::Array(array)));
            indent_like_siblings(table, key);
            Ok(true)
        }
        Some(item) => {
            let array = item
                .as_array_mut()
                .ok_or_else(|| format!("{RUNTIME_NAME}.{key} is not an array"))?;
            if array.iter().any(|value| value.as_str() == Some(entry)) {
                Ok(false)
            } else {
                array.push(entry);
                Ok(true)
            }
        }
    }
}

/// A key added to a table whose keys are indented is indented as the first of them.
fn indent_like_siblings(table: &mut dyn TableLike, key: &str) {
    let indent = table
        .iter()
        .filter(|(other, _)| *other != key)
        .find_map(|(other, _)| {
            let prefix = table.key(other)?.leaf_decor().prefix()?.as_str()?;
            Some(prefix.to_owned())
        });
    if let (Some(indent), Some(mut added)) = (indent, table.key_mut(key)) {
        added.leaf_decor_mut().set_prefix(indent);
    }
}

fn finish(text: &str, doc: DocumentMut, changes: Vec<String>) -> Edit {
    let text = if changes.iter().all(|change| change.starts_with("note:")) {
        text.to_owned()
    } else {
        doc.to_string()
    };
    Edit { text, changes }
}

/// A key path as TOML writes it, quoted where it must be.
fn shown_path(path: &[&str]) -> String {
    path.iter()
        .map(|key| {
            if key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                (*key).to_owned()
            } else {
                format!("{key:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's `/etc/containerd/config.toml` (bookworm's containerd 1.6.20).
    const DEBIAN: &str = include_str!("../../tests/containerd/debian-config.toml");

    fn runtimes_of(text: &str, cri: &[&str]) -> toml::Table {
        let mut table = toml::from_str::<toml::Table>(text).unwrap();
        for key in cri.iter().chain(&["containerd", "runtimes"]) {
            table = table.remove(*key).unwrap().try_into().unwrap();
        }
        table
    }

    /// Whether every line of `old` is in `new`, in order.
    fn keeps_every_line(old: &str, new: &str) -> bool {
        let mut new = new.lines();
        old.lines().all(|line| new.any(|other| other == line))
    }

    #[test]
    fn debians_file_gains_runc_and_the_runtime_and_loses_nothing() {
        let edit = add_runtime(DEBIAN).unwrap();
        assert!(keeps_every_line(DEBIAN, &edit.text), "{}", edit.text);
        let runtimes = runtimes_of(&edit.text, &["plugins", "io.containerd.grpc.v1.cri"]);
        assert_eq!(runtimes["runc"]["runtime_type"].as_str(), Some(RUNC_TYPE));
        assert_eq!(
            runtimes["wasm9p"]["runtime_type"].as_str(),
            Some(RUNTIME_TYPE)
        );
        for key in ["pod_annotations", "container_annotations"] {
            assert_eq!(
                runtimes["wasm9p"][key].as_array().unwrap(),
                &vec![toml::Value::from(ANNOTATIONS)]
            );
        }
        assert_eq!(edit.changes.len(), 2, "{:?}", edit.changes);
        assert!(edit.changes[0].contains("runc"));
        // Idempotent, to the byte.
        let again = add_runtime(&edit.text).unwrap();
        assert_eq!(
            (again.text.as_str(), again.changes.len()),
            (edit.text.as_str(), 0)
        );
        // And removed again, runc stays (containerd's default either way).
        let removed = remove_runtime(&edit.text).unwrap();
        let left = runtimes_of(&removed.text, &["plugins", "io.containerd.grpc.v1.cri"]);
        assert!(left.contains_key("runc") && !left.contains_key("wasm9p"));
        assert!(keeps_every_line(DEBIAN, &removed.text));
        assert!(remove_runtime(&removed.text).unwrap().changes.is_empty());
    }

    #[test]
    fn a_file_that_names_runc_keeps_its_runc_and_ours_keeps_the_keys_an_admin_added() {
        let text = r#"version = 2
# the operator's comment
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.wasm9p]
    runtime_type = "io.containerd.wasm9p.v1"
    privileged_without_host_devices = true
    pod_annotations = ["example.com/*"]
"#;
        let edit = add_runtime(text).unwrap();
        assert_eq!(edit.changes.len(), 1, "{:?}", edit.changes);
        assert!(edit.changes[0].contains("pod_annotations, container_annotations"));
        assert!(
            keeps_every_line(
                &text.replace("    pod_annotations = [\"example.com/*\"]\n", ""),
                &edit.text
            ),
            "{}",
            edit.text
        );
        assert!(edit.text.contains("# the operator's comment"));
        let runtimes = runtimes_of(&edit.text, &["plugins", "io.containerd.grpc.v1.cri"]);
        assert_eq!(
            runtimes["runc"]["options"]["SystemdCgroup"].as_bool(),
            Some(true)
        );
        assert_eq!(
            runtimes["wasm9p"]["privileged_without_host_devices"].as_bool(),
            Some(true)
        );
        assert_eq!(
            runtimes["wasm9p"]["pod_annotations"].as_array().unwrap(),
            &vec![
                toml::Value::from("example.com/*"),
                toml::Value::from(ANNOTATIONS)
            ]
        );
    }

    #[test]
    fn each_version_has_its_own_plugin_table_and_an_empty_file_becomes_version_2() {
        for (text, cri) in [
            ("oom_score = 0\n", vec!["plugins", "cri"]),
            (
                "version = 3\n",
                vec!["plugins", "io.containerd.cri.v1.runtime"],
            ),
            (
                "# nothing yet\n",
                vec!["plugins", "io.containerd.grpc.v1.cri"],
            ),
            ("", vec!["plugins", "io.containerd.grpc.v1.cri"]),
        ] {
            let edit = add_runtime(text).unwrap();
            let runtimes = runtimes_of(&edit.text, &cri);
            assert!(
                runtimes.contains_key("runc") && runtimes.contains_key("wasm9p"),
                "{text:?}"
            );
        }
        assert!(add_runtime("").unwrap().text.starts_with("version = 2"));
    }

    #[test]
    fn inline_and_dotted_tables_are_extended_where_they_are() {
        let inline = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
                      runtimes = { runc = { runtime_type = \"io.containerd.runc.v2\" } }\n";
        let dotted = "version = 2\n[plugins]\n\"io.containerd.grpc.v1.cri\".containerd.\
                      runtimes.runc.runtime_type = \"io.containerd.runc.v2\"\n";
        for text in [inline, dotted] {
            let edit = add_runtime(text).unwrap();
            assert_eq!(edit.changes.len(), 1, "{:?}", edit.changes);
            let runtimes = runtimes_of(&edit.text, &["plugins", "io.containerd.grpc.v1.cri"]);
            assert_eq!(
                runtimes["wasm9p"]["runtime_type"].as_str(),
                Some(RUNTIME_TYPE)
            );
            assert_eq!(runtimes.len(), 2);
        }
    }

    #[test]
    fn another_default_runtime_is_left_alone_and_noted() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
                    default_runtime_name = \"crun\"\n";
        let edit = add_runtime(text).unwrap();
        assert!(edit.changes[0].starts_with("note:") && edit.changes[0].contains("crun"));
        let runtimes = runtimes_of(&edit.text, &["plugins", "io.containerd.grpc.v1.cri"]);
        assert!(!runtimes.contains_key("runc") && runtimes.contains_key("wasm9p"));
    }

    #[test]
    fn what_it_cannot_change_safely_is_one_line_and_no_change() {
        for (text, needle) in [
            ("version = 4\n", "version 4, not one this installer knows"),
            ("version = \"2\"\n", "not one this installer knows"),
            ("version = 2\n[plugins\n", "does not parse: line 2"),
            (
                "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\ncontainerd = 1\n",
                "is not a table",
            ),
            (
                "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes]\n\
                 wasm9p = \"x\"\n",
                "wasm9p is not a table",
            ),
        ] {
            let err = add_runtime(text).unwrap_err();
            assert!(
                err.contains(needle) && !err.contains('\n'),
                "{text:?}: {err}"
            );
        }
    }
}
