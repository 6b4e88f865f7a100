// Attempts to leave the guest's namespace: `..` past the root and past a mount, absolute
// and relative symlinks that point outside, and writes through them. Nothing outside
// the mounts exists for the guest, and nothing is created on the host.
#include "scenario.h"

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
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
    show_file("still inside", at(d, "inside.txt"));
    return 0;
}
