// stat of missing paths, repeatedly (what a compiler's header search does), and that a
// name created or removed afterwards is seen at once, cached or not.
#include "scenario.h"

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
    SHOW("mkdir inc", mkdir(at(d, "inc"), 0755));
    write_file(at(d, "inc/present.h"), "#pragma once\n");
    for (int round = 0; round < 3; round++) {
        printf("round %d\n", round);
        show_stat("  missing file", at(d, "inc/missing.h"), 1);
        show_stat("  missing dir", at(d, "nodir/x.h"), 1);
        show_stat("  deep missing", at(d, "inc/a/b/c/d.h"), 1);
        show_stat("  file as dir", at(d, "inc/present.h/x"), 1);
        show_stat("  trailing slash on file", at(d, "inc/present.h/"), 1);
        show_stat("  present", at(d, "inc/present.h"), 1);
        SHOW("  access missing", access(at(d, "inc/missing.h"), F_OK));
        SHOW_FD("  open missing", open(at(d, "inc/missing.h"), O_RDONLY));
    }
    write_file(at(d, "inc/missing.h"), "now here\n");
    show_stat("created", at(d, "inc/missing.h"), 1);
    show_file("read created", at(d, "inc/missing.h"));
    SHOW("unlink it", unlink(at(d, "inc/missing.h")));
    show_stat("gone again", at(d, "inc/missing.h"), 1);
    SHOW("mkdir where missing", mkdir(at(d, "nodir"), 0755));
    write_file(at(d, "nodir/x.h"), "x");
    show_stat("under new dir", at(d, "nodir/x.h"), 1);
    SHOW("rename into missing name", rename(at(d, "nodir/x.h"), at(d, "inc/renamed.h")));
    show_stat("renamed in", at(d, "inc/renamed.h"), 1);
    show_stat("renamed out", at(d, "nodir/x.h"), 1);
    SHOW("symlink at missing", symlink("present.h", at(d, "inc/linked.h")));
    show_stat("via new link", at(d, "inc/linked.h"), 1);
    SHOW("empty path", access("", F_OK));
    return 0;
}
