//! What `clang -###` prints: the jobs the driver would run, and what else it said.
//!
//! Each job is one line of words, every word double-quoted with `"`, `\` and `$`
//! escaped by a backslash (LLVM's `Command::Print`). A job the driver runs in its own
//! process (`-cc1`, `-cc1as`) starts with an empty word, its argv[0], and the driver
//! prints ` (in-process)` before it. Before the jobs comes the driver's version
//! preamble (`clang version`, `Target:`, ...), which a plain run prints only with `-v`;
//! anything else (warnings, notes) is the driver talking to the user.

/// One job of a driver's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Job {
    /// Its words as printed: argv[0] (empty for the driver's own `-cc1` and `-cc1as`,
    /// else a tool such as `wasm-ld`) and its arguments.
    pub(crate) words: Vec<String>,
}

impl Job {
    /// The driver runs it in its own process: a `-cc1` or `-cc1as`.
    pub(crate) fn in_process(&self) -> bool {
        self.words.first().is_some_and(String::is_empty)
    }

    /// The argv for clang.wasm's multi-call binary: `llvm TOOL ARGS...`, where TOOL is
    /// argv[1] of an in-process job (`clang`), else the file name of the job's argv[0].
    pub(crate) fn guest_argv(&self) -> Vec<String> {
        let mut argv = vec!["llvm".to_owned()];
        match self.words.split_first() {
            Some((first, rest)) if first.is_empty() => argv.extend(rest.iter().cloned()),
            Some((first, rest)) => {
                let tool = first.rsplit('/').next().unwrap_or(first);
                argv.push(tool.to_owned());
                argv.extend(rest.iter().cloned());
            }
            None => {}
        }
        argv
    }

    /// The dependency file a `-cc1` writes (`-dependency-file PATH`), if it writes one.
    pub(crate) fn dependency_file(&self) -> Option<&str> {
        let at = self.words.iter().position(|w| w == "-dependency-file")?;
        self.words.get(at + 1).map(String::as_str)
    }

    /// What the job is called in a failure message: `linker` for a link, as clang says.
    pub(crate) fn what(&self) -> &'static str {
        match self.words.first().map(String::as_str) {
            Some(tool) if tool.ends_with("ld") || tool.contains("ld.") => "linker",
            Some("") => "compiler",
            _ => "tool",
        }
    }
}

/// A driver's plan: its jobs in order, and the lines meant for the user.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) jobs: Vec<Job>,
    /// Lines other than jobs, `(in-process)` markers and the version preamble.
    pub(crate) messages: Vec<String>,
}

/// The preamble lines `-###` prints first, which a plain run prints only with `-v`.
const PREAMBLE: &[&str] = &[
    "clang version ",
    "Target: ",
    "Thread model: ",
    "InstalledDir: ",
    "Build config: ",
    "Configuration file: ",
];

/// Reads `-###` output (the driver's stderr).
pub(crate) fn plan(stderr: &str) -> Plan {
    let mut plan = Plan::default();
    let mut in_preamble = true;
    for line in stderr.lines() {
        if in_preamble && PREAMBLE.iter().any(|p| line.starts_with(p)) {
            continue;
        }
        in_preamble = false;
        if line == " (in-process)" {
            continue;
        }
        match words(line) {
            Some(words) if !words.is_empty() => plan.jobs.push(Job { words }),
            _ => plan.messages.push(line.to_owned()),
        }
    }
    plan
}

/// The words of a job line (` "a" "b\"c"`), or `None` when the line is not one.
fn words(line: &str) -> Option<Vec<String>> {
    let rest = line.strip_prefix(' ')?;
    if !rest.starts_with('"') {
        return None;
    }
    let mut words = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        match chars.next() {
            None => return Some(words),
            Some(' ') => continue,
            Some('"') => {}
            Some(_) => return None,
        }
        let mut word = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => word.push(chars.next()?),
                c => word.push(c),
            }
        }
        if chars.peek().is_some_and(|&c| c != ' ') {
            return None;
        }
        words.push(word);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPILE_AND_LINK: &str = "clang version 22.1.0 (https://example/llvm 9560ae)\n\
        Target: wasm32-unknown-wasip1\n\
        Thread model: posix\n\
        InstalledDir: \n\
        Build config: +assertions\n\
        clang: warning: argument unused during compilation: '-L/x' [-Wunused-command-line-argument]\n \
        (in-process)\n \
        \"\" \"clang\" \"-cc1\" \"-D\" \"A=\\\"b c\\\"\" \"-o\" \"/tmp/a-1.o\" \"-x\" \"c\" \"a.c\"\n \
        \"wasm-ld\" \"-m\" \"wasm32\" \"/tmp/a-1.o\" \"-o\" \"a.wasm\"\n";

    #[test]
    fn jobs_come_in_order_with_their_words_unquoted() {
        let plan = plan(COMPILE_AND_LINK);
        assert_eq!(plan.jobs.len(), 2);
        assert_eq!(
            plan.jobs[0].guest_argv(),
            [
                "llvm",
                "clang",
                "-cc1",
                "-D",
                "A=\"b c\"",
                "-o",
                "/tmp/a-1.o",
                "-x",
                "c",
                "a.c"
            ]
        );
        assert!(plan.jobs[0].in_process());
        assert_eq!(plan.jobs[0].what(), "compiler");
        assert_eq!(
            plan.jobs[1].guest_argv(),
            [
                "llvm",
                "wasm-ld",
                "-m",
                "wasm32",
                "/tmp/a-1.o",
                "-o",
                "a.wasm"
            ]
        );
        assert_eq!(plan.jobs[1].what(), "linker");
    }

    #[test]
    fn warnings_are_kept_and_the_preamble_is_not() {
        let plan = plan(COMPILE_AND_LINK);
        assert_eq!(
            plan.messages,
            ["clang: warning: argument unused during compilation: '-L/x' [-Wunused-command-line-argument]"]
        );
    }

    #[test]
    fn errors_are_messages_and_make_no_jobs() {
        let plan = plan("clang version 22\nclang: error: no such file or directory: 'x.c'\n");
        assert!(plan.jobs.is_empty());
        assert_eq!(
            plan.messages,
            ["clang: error: no such file or directory: 'x.c'"]
        );
    }

    #[test]
    fn a_line_that_only_looks_like_a_job_is_a_message() {
        for line in [
            " \"unterminated",
            " \"a\"b",
            "\"no leading space\"",
            " plain",
        ] {
            assert_eq!(words(line), None, "{line:?}");
        }
        assert_eq!(
            words(" \"a\\$b\" \"\\\\\""),
            Some(vec!["a$b".into(), "\\".into()])
        );
    }
}
