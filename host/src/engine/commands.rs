//! A COMMANDS file, as `wasm9p batch` and the benchmarks read it: one guest a line,
//! its argv in shell words, `argv[0]` first; blank lines and `#` comments skipped.

/// One COMMANDS line.
#[derive(Debug)]
pub struct Job {
    /// Its line number (from 1).
    pub line: usize,
    /// Its argv words, `argv[0]` first.
    pub argv: Vec<String>,
}

/// Parses COMMANDS (see the module docs). The error names the line.
pub fn parse_commands(text: &str) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let argv = shlex::split(trimmed)
            .ok_or_else(|| format!("line {}: unbalanced quotes or a trailing backslash", i + 1))?;
        jobs.push(Job { line: i + 1, argv });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shell_words_one_guest_per_line() {
        let jobs = parse_commands("# a comment\n\nclang -c 'a b.c' -o \"a b.o\"\n  cc1 x\\ y  \n")
            .unwrap();
        let got: Vec<(usize, Vec<&str>)> = jobs
            .iter()
            .map(|j| (j.line, j.argv.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (3, vec!["clang", "-c", "a b.c", "-o", "a b.o"]),
                (4, vec!["cc1", "x y"]),
            ]
        );
    }

    #[test]
    fn unbalanced_quotes_name_the_line() {
        let err = parse_commands("ok\nbad 'quote\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }
}
