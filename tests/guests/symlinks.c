// Symlinks: relative, absolute (in the guest's namespace; WASI refuses to make one, so
// the test puts `abs` there on the host first), chains, dangling, loops,
// readlink, lstat vs stat, creating through a dangling link, and the errors around them.
#include "scenario.h"

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
    char buf[256];
    SHOW("mkdir sub", mkdir(at(d, "sub"), 0755));
    write_file(at(d, "sub/target.txt"), "target text");
    SHOW("symlink relative", symlink("sub/target.txt", at(d, "rel")));
    SHOW("symlink absolute", symlink(at(d, "sub/target.txt"), at(d, "abs")));
    SHOW("symlink chain", symlink("rel", at(d, "chain")));
    SHOW("symlink to dir", symlink("sub", at(d, "subdir")));
    SHOW("symlink dangling", symlink("sub/later.txt", at(d, "dangling")));
    SHOW("symlink loop a", symlink("loop-b", at(d, "loop-a")));
    SHOW("symlink loop b", symlink("loop-a", at(d, "loop-b")));
    SHOW("symlink over existing", symlink("x", at(d, "rel")));
    const char *links[] = {"rel", "abs", "chain", "subdir", "dangling", "loop-a"};
    for (int i = 0; i < 6; i++) {
        memset(buf, 0, sizeof buf);
        ssize_t n = readlink(at(d, links[i]), buf, sizeof buf - 1);
        printf("readlink %s: %zd %s\n", links[i], n, n >= 0 ? buf : strerror(errno));
        show_stat("  stat", at(d, links[i]), 1);
        show_stat("  lstat", at(d, links[i]), 0);
    }
    memset(buf, 0, sizeof buf);
    printf("readlink short buffer: %zd\n", readlink(at(d, "rel"), buf, 4));
    printf("  got \"%s\"\n", buf);
    SHOW("readlink of a file", readlink(at(d, "sub/target.txt"), buf, sizeof buf));
    SHOW("readlink missing", readlink(at(d, "none"), buf, sizeof buf));
    show_file("read via chain", at(d, "chain"));
    show_file("read via dir link", at(d, "subdir/target.txt"));
    show_file("read via loop", at(d, "loop-a"));
    SHOW_FD("open nofollow", open(at(d, "rel"), O_RDONLY | O_NOFOLLOW));
    // O_CREAT through a dangling link creates its target.
    int fd = open(at(d, "dangling"), O_WRONLY | O_CREAT, 0644);
    SHOW("create via dangling", fd >= 0 ? 0 : -1);
    if (fd >= 0) { SHOW("write", write(fd, "later", 5)); close(fd); }
    show_file("target now", at(d, "sub/later.txt"));
    SHOW_FD("create excl via link", open(at(d, "rel"), O_WRONLY | O_CREAT | O_EXCL, 0644));
    SHOW("unlink link", unlink(at(d, "rel")));
    show_stat("target still there", at(d, "sub/target.txt"), 1);
    show_stat("chain now dangling", at(d, "chain"), 1);
    SHOW("rmdir via dir link", rmdir(at(d, "subdir")));
    SHOW("mkdir over link", mkdir(at(d, "abs"), 0755));
    // A link replaced by another with the same name: the new target is read.
    SHOW("unlink abs", unlink(at(d, "abs")));
    SHOW("symlink abs again", symlink("sub/later.txt", at(d, "abs")));
    memset(buf, 0, sizeof buf);
    readlink(at(d, "abs"), buf, sizeof buf - 1);
    printf("readlink replaced: %s\n", buf);
    show_file("read replaced", at(d, "abs"));
    return 0;
}
