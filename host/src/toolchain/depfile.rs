//! Dependency files (`-MD`, `-MMD`, `-MF`) name the headers as the guest saw them; the
//! toolchain's own are under the guest's `/usr`, which on the host is the toolchain's
//! `sysroot/usr`. Make and ninja read these files on the host, so every prerequisite
//! under `/usr/` is rewritten to the host path (a header that make could not find
//! would fail the next build with "No rule to make target"). Paths in the project are
//! the same on both sides and stay as they are.
//!
//! The format is make's: `target: prereq prereq \` lines, a space inside a name
//! escaped as `\ `, `$` as `$$`.

use std::path::Path;

/// `text` with each name under the guest's `/usr/` moved to `usr` (a host directory).
pub(crate) fn to_host(text: &str, usr: &Path) -> String {
    let host = escape(&usr.display().to_string());
    let mut out = String::with_capacity(text.len());
    let mut at_name_start = true;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if at_name_start && rest.starts_with("/usr/") {
            out.push_str(&host);
            rest = &rest["/usr".len()..];
            at_name_start = false;
            continue;
        }
        if c == '\\' && rest[1..].starts_with(' ') {
            // An escaped space is part of the name.
            out.push_str("\\ ");
            rest = &rest[2..];
            at_name_start = false;
            continue;
        }
        at_name_start = c == ' ' || c == '\t' || c == '\n' || c == ':';
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A path as a name in a make rule.
fn escape(path: &str) -> String {
    path.replace('$', "$$").replace(' ', "\\ ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_headers_move_to_the_host_toolchain_and_project_ones_stay() {
        let text = "b.o: b.c ../inc/x.h /usr/include/stdio.h \\\n  /usr/include/a\\ b.h \
                    /p/usr/include/not.h\n";
        assert_eq!(
            to_host(text, Path::new("/home/u/tool chain/sysroot/usr")),
            "b.o: b.c ../inc/x.h /home/u/tool\\ chain/sysroot/usr/include/stdio.h \\\n  \
             /home/u/tool\\ chain/sysroot/usr/include/a\\ b.h /p/usr/include/not.h\n"
        );
    }

    #[test]
    fn a_target_under_usr_is_a_name_too() {
        assert_eq!(to_host("x.o:/usr/a.h\n", Path::new("/t")), "x.o:/t/a.h\n");
    }
}
