//! Bazel's test actions, carried out for a wasm test.
//!
//! Bazel runs a test as an action whose arguments are its `test-setup.sh` (a bash
//! script of `@bazel_tools`) followed by the test binary and its arguments, with the
//! test's variables (`TEST_SRCDIR`, `TEST_TMPDIR`, `XML_OUTPUT_FILE`, sharding's, ...)
//! as paths from the execution root. A worker that runs only wasm cannot run the
//! script, so it does what the script does, for a test binary that is wasm:
//! - **Where.** The test starts in its runfiles, `$TEST_SRCDIR/$TEST_WORKSPACE`, when
//!   the input root has them (else in the `Command`'s working directory), and its
//!   binary is found from there.
//! - **Its variables.** Those naming paths (see [`PATH_VARIABLES`]) are given from
//!   where the test starts (the script makes them absolute; a preview1 guest started
//!   in a directory of the input root reads an absolute path from that directory, so
//!   `../../_tmp/x` is what reaches `/_tmp/x` there), and `TEST_TMPDIR` and
//!   `TEST_UNDECLARED_OUTPUTS_DIR` are made before it starts. Sharding
//!   (`TEST_TOTAL_SHARDS`, `TEST_SHARD_INDEX`, `TEST_SHARD_STATUS_FILE`), filters and
//!   the premature-exit file are the test's to honour, as with the script.
//! - **Its outcome.** Its stdout and stderr are the action's, which Bazel keeps as
//!   the test's log; its exit code passes or fails it. Past the action's timeout
//!   (Bazel's, from the test's size or `--test_timeout`) the action fails
//!   DEADLINE_EXCEEDED, which Bazel reports as TIMEOUT.
//! - **`test.xml`.** The test's own, if it wrote `XML_OUTPUT_FILE`; else the worker
//!   writes one as Bazel's `generate-xml.sh` would ([`junit_xml`]: one test case named
//!   after the binary, its duration, an error with the exit code when it failed, the
//!   log), so that Bazel needs no second action (a shell script again) to make it.
//! - **Undeclared outputs.** What the test wrote under `TEST_UNDECLARED_OUTPUTS_DIR`
//!   is archived into `TEST_UNDECLARED_OUTPUTS_ZIP` as the script's `zip -r` would (a
//!   zip of stored files, [`crate::stored_zip`]), which Bazel unpacks into
//!   `test.outputs/`; its manifest and the test's annotations are made as the script
//!   makes them ([`undeclared`]).
//!
//! [`test_setup`] says how to start the test; [`TestSetup::leave_results`] leaves
//! `test.xml` and the zip after it.
//!
//! A test action whose binary is not wasm (a `sh_test`, say) is refused as any
//! `arguments[0]` that is not wasm is: INVALID_ARGUMENT, naming the binary.

use std::time::Duration;

use bytes::Bytes;

use crate::apis::v2;
use crate::layer::ActionFs;
use crate::store::{ContentStore, Fetch};
use crate::stored_zip;
use crate::tree::{within_root, InputTree, TreeNode};

pub mod undeclared;

/// The script's file name, `arguments[0]` of a Bazel test action.
pub const TEST_SETUP: &str = "test-setup.sh";

/// The test variables that hold paths from the execution root.
pub const PATH_VARIABLES: &[&str] = &[
    "TEST_SRCDIR",
    "TEST_TMPDIR",
    "RUNFILES_DIR",
    "JAVA_RUNFILES",
    "PYTHON_RUNFILES",
    "XML_OUTPUT_FILE",
    "TEST_UNDECLARED_OUTPUTS_DIR",
    "TEST_UNDECLARED_OUTPUTS_ZIP",
    "TEST_UNDECLARED_OUTPUTS_MANIFEST",
    "TEST_UNDECLARED_OUTPUTS_ANNOTATIONS",
    "TEST_UNDECLARED_OUTPUTS_ANNOTATIONS_DIR",
    "TEST_PREMATURE_EXIT_FILE",
    "TEST_INFRASTRUCTURE_FAILURE_FILE",
    "TEST_WARNINGS_OUTPUT_FILE",
    "TEST_LOGSPLITTER_OUTPUT_FILE",
    "TEST_UNUSED_RUNFILES_LOG_FILE",
    "TEST_SHARD_STATUS_FILE",
];

/// How to run a Bazel test action's binary as the script would.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestSetup {
    /// The guest's arguments: the binary as given, then the test's arguments.
    pub argv: Vec<String>,
    /// The binary's path from the input root (whatever it is: the caller checks).
    pub binary: Option<String>,
    /// Where the test starts, from the input root.
    pub working_dir: String,
    /// The environment, its paths from the working directory.
    pub env: Vec<(String, String)>,
    /// Directories to make first, from the input root.
    pub dirs: Vec<String>,
    /// Where Bazel reads `test.xml`, from the input root.
    pub xml: Option<String>,
    /// The undeclared outputs' directory, from the input root.
    pub undeclared: Option<String>,
    /// The zip Bazel reads them from, from the input root.
    pub zip: Option<String>,
    /// Where their manifest goes, from the input root.
    pub manifest: Option<String>,
    /// The annotations' directory and the file they go to, from the input root.
    pub annotations: Option<(String, String)>,
    /// The test's name in `test.xml`: the binary as given, less a leading `./`.
    pub name: String,
}

/// Whether `command` is a Bazel test action: `arguments[0]` is `test-setup.sh` and
/// there is a test binary after it.
pub fn is_test(command: &v2::Command) -> bool {
    command.arguments.len() >= 2
        && command.arguments[0]
            .rsplit('/')
            .next()
            .is_some_and(|name| name == TEST_SETUP)
}

/// How to run the test action `command` (see [`is_test`]) whose working directory is
/// `wd`, on `tree`.
pub fn test_setup(command: &v2::Command, wd: &str, tree: &InputTree) -> TestSetup {
    let var = |name: &str| {
        command
            .environment_variables
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    };
    // A path the script would take from the execution root (the working directory).
    let from_root = |value: &str| within_root(wd, value);
    let runfiles = var("TEST_SRCDIR")
        .zip(var("TEST_WORKSPACE"))
        .and_then(|(srcdir, workspace)| from_root(&format!("{srcdir}/{workspace}")))
        .filter(|dir| {
            tree.resolve("", dir)
                .is_some_and(|i| matches!(tree.node(i).0, TreeNode::Dir { .. }))
        });
    let working_dir = runfiles.unwrap_or_else(|| wd.to_owned());
    let given = &command.arguments[1];
    let binary = match given.strip_prefix('/') {
        Some(_) => None,
        None => within_root(&working_dir, given),
    };
    let env = command
        .environment_variables
        .iter()
        .map(|v| {
            let value = match PATH_VARIABLES.contains(&v.name.as_str()) {
                true => from_root(&v.value)
                    .map(|p| relative(&working_dir, &p))
                    .unwrap_or_else(|| v.value.clone()),
                false => v.value.clone(),
            };
            (v.name.clone(), value)
        })
        .collect();
    let dirs = [
        "TEST_TMPDIR",
        "TEST_UNDECLARED_OUTPUTS_DIR",
        "TEST_UNDECLARED_OUTPUTS_ANNOTATIONS_DIR",
    ]
    .iter()
    .filter_map(|name| var(name).and_then(from_root))
    .collect();
    TestSetup {
        argv: command.arguments[1..].to_vec(),
        binary,
        working_dir,
        env,
        dirs,
        xml: var("XML_OUTPUT_FILE").and_then(from_root),
        undeclared: var("TEST_UNDECLARED_OUTPUTS_DIR").and_then(from_root),
        zip: var("TEST_UNDECLARED_OUTPUTS_ZIP").and_then(from_root),
        manifest: var("TEST_UNDECLARED_OUTPUTS_MANIFEST").and_then(from_root),
        annotations: var("TEST_UNDECLARED_OUTPUTS_ANNOTATIONS_DIR")
            .and_then(from_root)
            .zip(var("TEST_UNDECLARED_OUTPUTS_ANNOTATIONS").and_then(from_root)),
        name: given.strip_prefix("./").unwrap_or(given).to_owned(),
    }
}

/// Why what a test leaves could not be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResultsError {
    /// The undeclared outputs are over the worker's bound on outputs (or a zip's).
    #[error("the undeclared outputs are over {0}")]
    TooLarge(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Failed(String),
}

/// How a test ran, for what is left after it.
#[derive(Clone, Copy, Debug)]
pub struct TestRan<'a> {
    /// How long it ran.
    pub took: Duration,
    /// Its exit code (`None`: it was stopped).
    pub exit_code: Option<i32>,
    /// What it printed: stdout, then stderr.
    pub log: &'a [u8],
}

impl TestSetup {
    /// Leaves what the script leaves once the test has run as `ran` says: its
    /// `test.xml`, unless it wrote its own, and the zip of its undeclared outputs,
    /// their manifest and its annotations (at most `limit` bytes of outputs, and as
    /// many of annotations; a file of the input root moved there read from `store`
    /// through `fetch`).
    pub async fn leave_results(
        &self,
        fs: &ActionFs,
        ran: TestRan<'_>,
        (store, fetch): (&ContentStore, &dyn Fetch),
        limit: u64,
    ) -> Result<(), ResultsError> {
        let write = |path: &str, bytes: Vec<u8>| {
            let path = path.to_owned();
            async move {
                fs.write_file(&path, Bytes::from(bytes))
                    .await
                    .map_err(|e| ResultsError::Failed(format!("writing {path}: {e}")))
            }
        };
        if let Some(xml) = &self.xml {
            if fs.resolve(xml).is_err() {
                let text = junit_xml(&self.name, ran.took, ran.exit_code, ran.log);
                write(xml, text.into_bytes()).await?;
            }
        }
        let files = match &self.undeclared {
            Some(dir) => undeclared::files_under(fs, dir, limit, store, fetch).await?,
            None => Vec::new(),
        };
        if let (Some(zip), false) = (&self.zip, files.is_empty()) {
            let entries: Vec<stored_zip::Entry> = files
                .iter()
                .map(|(name, mode, bytes)| stored_zip::Entry {
                    name,
                    mode: *mode,
                    bytes,
                })
                .collect();
            let archive = stored_zip::archive(&entries)
                .map_err(|_| ResultsError::TooLarge("a zip's 4 GiB or 65,535 files".into()))?;
            write(zip, archive).await?;
        }
        if let (Some(path), Some(text)) = (&self.manifest, undeclared::manifest(&files)) {
            write(path, text.into_bytes()).await?;
        }
        if let Some((dir, to)) = &self.annotations {
            let parts = undeclared::files_under(fs, dir, limit, store, fetch).await?;
            if let Some(text) = undeclared::annotations(&parts) {
                write(to, text).await?;
            }
        }
        Ok(())
    }
}

/// The path to `to` from the directory `from` (both from the input root).
fn relative(from: &str, to: &str) -> String {
    let from: Vec<&str> = from.split('/').filter(|n| !n.is_empty()).collect();
    let to: Vec<&str> = to.split('/').filter(|n| !n.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let parts: Vec<&str> = std::iter::repeat_n("..", from.len() - common)
        .chain(to[common..].iter().copied())
        .collect();
    match parts.is_empty() {
        true => ".".into(),
        false => parts.join("/"),
    }
}

/// A `test.xml` for a test that wrote none, as Bazel's `generate-xml.sh` makes it: the
/// test `name`, how long it ran, its exit code (`None`: it did not exit, it was
/// stopped), and its `log` (stdout, then stderr).
pub fn junit_xml(name: &str, took: Duration, exit_code: Option<i32>, log: &[u8]) -> String {
    let secs = format!("{:.3}", took.as_secs_f64());
    let name = escape_attribute(name);
    let (errors, error) = match exit_code {
        Some(0) => (0, String::new()),
        Some(code) => (
            1,
            format!("<error message=\"exited with error code {code}\"></error>"),
        ),
        None => (
            1,
            "<error message=\"stopped before it exited\"></error>".into(),
        ),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <testsuites>\n\
         \x20 <testsuite name=\"{name}\" tests=\"1\" failures=\"0\" errors=\"{errors}\">\n\
         \x20   <testcase name=\"{name}\" status=\"run\" duration=\"{secs}\" time=\"{secs}\">{error}</testcase>\n\
         \x20   <system-out><![CDATA[{log}]]></system-out>\n\
         \x20 </testsuite>\n\
         </testsuites>\n",
        log = cdata(log),
    )
}

/// Text XML may hold: invalid UTF-8 and the control characters XML forbids become
/// U+FFFD.
fn xml_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => '\u{fffd}',
            c => c,
        })
        .collect()
}

fn escape_attribute(s: &str) -> String {
    xml_text(s.as_bytes())
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `bytes` for inside a CDATA section: a `]]>` in them closes it and opens another.
fn cdata(bytes: &[u8]) -> String {
    xml_text(bytes).replace("]]>", "]]]]><![CDATA[>")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::Digest;

    fn env(pairs: &[(&str, &str)]) -> Vec<v2::command::EnvironmentVariable> {
        pairs
            .iter()
            .map(|(name, value)| v2::command::EnvironmentVariable {
                name: (*name).into(),
                value: (*value).into(),
            })
            .collect()
    }

    /// An input root with the test binary and, if `runfiles`, its runfiles tree.
    fn tree(runfiles: bool) -> InputTree {
        let wasm = v2::FileNode {
            name: "t_test".into(),
            digest: Some(Digest::of(b"\0asm").to_proto()),
            is_executable: true,
            ..Default::default()
        };
        let digest = |d: &v2::Directory| Digest::of(&prost::Message::encode_to_vec(d));
        let dir = |name: &str, d: &v2::Directory| v2::DirectoryNode {
            name: name.into(),
            digest: Some(digest(d).to_proto()),
        };
        let mut all = HashMap::new();
        let mut keep = |d: v2::Directory| {
            all.insert(digest(&d), d.clone());
            d
        };
        let main = keep(v2::Directory {
            files: vec![wasm.clone()],
            ..Default::default()
        });
        let rf = keep(v2::Directory {
            directories: vec![dir("__main__", &main)],
            ..Default::default()
        });
        let mut bin_dirs = vec![];
        if runfiles {
            bin_dirs.push(dir("t_test.runfiles", &rf));
        }
        let bin = keep(v2::Directory {
            files: vec![wasm],
            directories: bin_dirs,
            ..Default::default()
        });
        let out = keep(v2::Directory {
            directories: vec![dir("bin", &bin)],
            ..Default::default()
        });
        let root = keep(v2::Directory {
            directories: vec![dir("bazel-out", &out)],
            ..Default::default()
        });
        InputTree::build(digest(&root), &all).unwrap()
    }

    fn command() -> v2::Command {
        v2::Command {
            arguments: vec![
                "external/bazel_tools/tools/test/test-setup.sh".into(),
                "./t_test".into(),
                "--flag".into(),
            ],
            environment_variables: env(&[
                ("TEST_SRCDIR", "bazel-out/bin/t_test.runfiles"),
                ("TEST_WORKSPACE", "__main__"),
                ("TEST_TMPDIR", "_tmp/abc"),
                ("XML_OUTPUT_FILE", "bazel-out/testlogs/t_test/test.xml"),
                (
                    "TEST_UNDECLARED_OUTPUTS_DIR",
                    "bazel-out/testlogs/t_test/test.outputs",
                ),
                ("TEST_TARGET", "//:t_test"),
                ("TEST_SHARD_INDEX", "1"),
                ("TEST_BINARY", "./t_test"),
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn a_test_action_is_test_setup_with_a_binary_after_it() {
        assert!(is_test(&command()));
        let mut c = command();
        c.arguments.truncate(1);
        assert!(!is_test(&c), "no binary");
        c.arguments = vec!["bin/not-test-setup.sh".into(), "./t_test".into()];
        assert!(!is_test(&c));
    }

    #[test]
    fn the_test_starts_in_its_runfiles_with_its_paths_from_there() {
        let setup = test_setup(&command(), "", &tree(true));
        assert_eq!(setup.working_dir, "bazel-out/bin/t_test.runfiles/__main__");
        assert_eq!(
            setup.binary.as_deref(),
            Some("bazel-out/bin/t_test.runfiles/__main__/t_test")
        );
        assert_eq!(setup.argv, ["./t_test", "--flag"]);
        let env: HashMap<_, _> = setup.env.into_iter().collect();
        assert_eq!(env["TEST_TMPDIR"], "../../../../_tmp/abc");
        assert_eq!(env["TEST_SRCDIR"], "..");
        assert_eq!(env["XML_OUTPUT_FILE"], "../../../testlogs/t_test/test.xml");
        // What is no path stays as it is.
        assert_eq!(env["TEST_TARGET"], "//:t_test");
        assert_eq!(env["TEST_SHARD_INDEX"], "1");
        assert_eq!(env["TEST_BINARY"], "./t_test");
        assert_eq!(
            setup.dirs,
            ["_tmp/abc", "bazel-out/testlogs/t_test/test.outputs"]
        );
        assert_eq!(
            setup.xml.as_deref(),
            Some("bazel-out/testlogs/t_test/test.xml")
        );
        assert_eq!(setup.name, "t_test");
    }

    #[test]
    fn without_runfiles_the_test_starts_in_the_working_directory() {
        let mut c = command();
        c.arguments[1] = "bazel-out/bin/t_test".into();
        let setup = test_setup(&c, "", &tree(false));
        assert_eq!(setup.working_dir, "");
        assert_eq!(setup.binary.as_deref(), Some("bazel-out/bin/t_test"));
        // A variable that would leave the root is left as it is, for the guest to
        // fail on.
        c.environment_variables = env(&[("TEST_TMPDIR", "../../etc")]);
        let setup = test_setup(&c, "", &tree(false));
        assert_eq!(setup.env, [("TEST_TMPDIR".into(), "../../etc".into())]);
        assert!(setup.dirs.is_empty());
    }

    #[test]
    fn paths_are_given_from_the_working_directory() {
        assert_eq!(relative("a/b", "a/b"), ".");
        assert_eq!(relative("a/b", "a/b/c"), "c");
        assert_eq!(relative("a/b", "a"), "..");
        assert_eq!(relative("a/b", "x/y"), "../../x/y");
        assert_eq!(relative("", "x/y"), "x/y");
        assert_eq!(relative("ab/c", "a/c"), "../../a/c");
    }

    #[test]
    fn a_generated_test_xml_says_pass_or_fail_and_carries_any_log_as_valid_xml() {
        let ok = junit_xml(
            "t_test",
            Duration::from_millis(1500),
            Some(0),
            b"all good\n",
        );
        assert!(ok.contains(r#"<testsuite name="t_test" tests="1" failures="0" errors="0">"#));
        assert!(ok.contains(r#"duration="1.500" time="1.500">"#), "{ok}");
        assert!(ok.contains("<![CDATA[all good\n]]>"), "{ok}");
        assert!(!ok.contains("<error"), "{ok}");
        let failed = junit_xml("a<b\"&", Duration::ZERO, Some(3), b"x]]>y\x01\xff");
        assert!(failed.contains(r#"name="a&lt;b&quot;&amp;""#), "{failed}");
        assert!(failed.contains(r#"errors="1""#), "{failed}");
        assert!(failed.contains(r#"<error message="exited with error code 3"></error>"#));
        assert!(
            failed.contains("<![CDATA[x]]]]><![CDATA[>y\u{fffd}\u{fffd}]]>"),
            "{failed}"
        );
        let stopped = junit_xml("t", Duration::ZERO, None, b"");
        assert!(stopped.contains("stopped before it exited"), "{stopped}");
    }
}
