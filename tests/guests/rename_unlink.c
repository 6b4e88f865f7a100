// rename, link, unlink and rmdir, with the errors each can give; a rename to another
// mount (argv[2]) is EXDEV.
#include "scenario.h"

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
    const char *other = argc > 2 ? argv[2] : NULL;
    write_file(at(d, "a.txt"), "A");
    write_file(at(d, "b.txt"), "B");
    SHOW("mkdir d1", mkdir(at(d, "d1"), 0755));
    SHOW("mkdir d2", mkdir(at(d, "d2"), 0755));
    write_file(at(d, "d2/inside"), "I");
    SHOW("rename file", rename(at(d, "a.txt"), at(d, "c.txt")));
    show_stat("old name", at(d, "a.txt"), 1);
    show_file("new name", at(d, "c.txt"));
    SHOW("rename over file", rename(at(d, "b.txt"), at(d, "c.txt")));
    show_file("replaced", at(d, "c.txt"));
    show_stat("source gone", at(d, "b.txt"), 1);
    SHOW("rename into dir", rename(at(d, "c.txt"), at(d, "d1/c.txt")));
    show_file("moved", at(d, "d1/c.txt"));
    SHOW("rename dir", rename(at(d, "d1"), at(d, "d3")));
    show_file("through renamed dir", at(d, "d3/c.txt"));
    show_stat("old dir", at(d, "d1"), 1);
    SHOW("rename dir over non-empty dir", rename(at(d, "d3"), at(d, "d2")));
    SHOW("rename file over dir", rename(at(d, "d3/c.txt"), at(d, "d2")));
    SHOW("rename dir over file", rename(at(d, "d2"), at(d, "d3/c.txt")));
    SHOW("rename dir into itself", rename(at(d, "d2"), at(d, "d2/sub")));
    SHOW("rename missing", rename(at(d, "nope"), at(d, "nope2")));
    SHOW("rename to same", rename(at(d, "d3/c.txt"), at(d, "d3/c.txt")));
    SHOW("mkdir empty", mkdir(at(d, "empty"), 0755));
    SHOW("rename dir over empty dir", rename(at(d, "d3"), at(d, "empty")));
    show_file("after dir over empty", at(d, "empty/c.txt"));
    if (other) {
        write_file(at(d, "x.txt"), "X");
        SHOW("rename across mounts", rename(at(d, "x.txt"), at(other, "x.txt")));
        SHOW("link across mounts", link(at(d, "x.txt"), at(other, "x.txt")));
    }
    SHOW("link", link(at(d, "empty/c.txt"), at(d, "hard")));
    struct stat st;
    if (stat(at(d, "hard"), &st) == 0) printf("nlink %ld\n", (long)st.st_nlink);
    SHOW("link over existing", link(at(d, "empty/c.txt"), at(d, "hard")));
    SHOW("link a dir", link(at(d, "d2"), at(d, "d2link")));
    SHOW("unlink a dir", unlink(at(d, "d2")));
    SHOW("rmdir non-empty", rmdir(at(d, "d2")));
    SHOW("rmdir a file", rmdir(at(d, "hard")));
    SHOW("unlink missing", unlink(at(d, "nope")));
    SHOW("unlink hard", unlink(at(d, "hard")));
    show_file("other name still there", at(d, "empty/c.txt"));
    SHOW("unlink inside", unlink(at(d, "d2/inside")));
    SHOW("rmdir now empty", rmdir(at(d, "d2")));
    SHOW("rmdir again", rmdir(at(d, "d2")));
    SHOW("rmdir dot", rmdir(at(d, "empty/.")));
    // An open file survives the unlink of its name.
    int fd = open(at(d, "empty/c.txt"), O_RDONLY);
    SHOW("unlink open file", unlink(at(d, "empty/c.txt")));
    char buf[8] = {0};
    SHOW("read after unlink", read(fd, buf, 7));
    printf("got \"%s\"\n", buf);
    close(fd);
    show_stat("unlinked", at(d, "empty/c.txt"), 1);
    return 0;
}
