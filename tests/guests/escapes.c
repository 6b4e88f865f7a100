// Attempts to leave the guest's namespace: `..` past the root and past a mount, absolute
// and relative symlinks that point outside, and writes through them (WASI refuses to
// make absolute links, so the test puts `etc` and `passwd` there on the host first). Nothing outside
// the mounts exists for the guest, and nothing is created on the host. Also: looping
// symlinks, opening through a symlinked directory (allowed, and stays inside), and
// renames and links from one mount to another (EXDEV).
#include "scenario.h"

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
    const char *other = argc > 2 ? argv[2] : "/other";
    char buf[256];
    write_file(at(d, "inside.txt"), "inside");
    show_file("plain", at(d, "inside.txt"));
    show_file("dotdot at root", "/../../../etc/passwd");
    show_file("dotdot past mount", at(d, "../../../../etc/passwd"));
    show_file("dotdot back in", at(d, "../../data/inside.txt"));
    show_stat("root", "/..", 1);
    SHOW("symlink abs out", symlink("/etc", at(d, "etc")));
    SHOW("symlink rel out", symlink("../../../../../etc", at(d, "up")));
    SHOW("symlink to host file", symlink("/etc/passwd", at(d, "passwd")));
    show_file("via abs", at(d, "etc/passwd"));
    show_file("via rel", at(d, "up/passwd"));
    show_file("via file link", at(d, "passwd"));
    memset(buf, 0, sizeof buf);
    readlink(at(d, "up"), buf, sizeof buf - 1);
    printf("readlink keeps the text: %s\n", buf);
    SHOW_FD("create through abs link", open(at(d, "etc/wasm9p-escaped"), O_WRONLY | O_CREAT, 0644));
    SHOW("mkdir through rel link", mkdir(at(d, "up/wasm9p-escaped-dir"), 0755));
    SHOW("mkdir at the root", mkdir("/wasm9p-escaped-root", 0755));
    SHOW_FD("create via dangling out", open(at(d, "passwd"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    SHOW("rename out", rename(at(d, "inside.txt"), "/../inside.txt"));
    SHOW("symlink chain out", symlink("up/passwd", at(d, "chain")));
    show_file("via chain", at(d, "chain"));
    SHOW_DIR("opendir via rel link", opendir(at(d, "up")));
    SHOW("loop a", symlink("loop-b", at(d, "loop-a")));
    SHOW("loop b", symlink("loop-a", at(d, "loop-b")));
    SHOW_FD("open a loop", open(at(d, "loop-a"), O_RDONLY));
    show_stat("stat a loop", at(d, "loop-a"), 1);
    SHOW_FD("create through a loop", open(at(d, "loop-a/x"), O_WRONLY | O_CREAT, 0644));
    SHOW("real dir", mkdir(at(d, "real"), 0755));
    write_file(at(d, "real/f"), "through");
    SHOW("dir link", symlink("real", at(d, "dirlink")));
    show_file("read through a dir link", at(d, "dirlink/f"));
    SHOW_FD("create through a dir link", open(at(d, "dirlink/made"), O_WRONLY | O_CREAT, 0644));
    show_stat("made lands in the real dir", at(d, "real/made"), 1);
    SHOW_DIR("opendir through a dir link", opendir(at(d, "dirlink")));
    SHOW("rename across mounts", rename(at(d, "inside.txt"), at(other, "inside.txt")));
    SHOW("rename a dir across mounts", rename(at(d, "real"), at(other, "real")));
    SHOW("link across mounts", link(at(d, "inside.txt"), at(other, "linked.txt")));
    show_file("still inside", at(d, "inside.txt"));
    return 0;
}
