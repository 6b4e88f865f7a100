// readdir of 300 entries: every name exactly once, telldir/seekdir, rewinddir, and the
// listing after removing a third of them.
#include "scenario.h"

static int count(const char *dir, int *seen) {
    DIR *dp = opendir(dir);
    if (!dp) { printf("opendir: %s\n", strerror(errno)); return -1; }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int i;
        if (sscanf(e->d_name, "entry-%d", &i) == 1 && i >= 0 && i < 300) seen[i]++;
        else printf("unexpected name %s\n", e->d_name);
        if (e->d_type != DT_REG && e->d_type != DT_UNKNOWN) printf("%s type %d\n", e->d_name, e->d_type);
        n++;
    }
    closedir(dp);
    return n;
}

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
    const char *dir = at(d, "many");
    SHOW("mkdir", mkdir(dir, 0755));
    char name[1024];
    for (int i = 0; i < 300; i++) {
        snprintf(name, sizeof name, "%s/entry-%03d", dir, i);
        int fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0) printf("create %d: %s\n", i, strerror(errno));
        else close(fd);
    }
    int seen[300] = {0};
    printf("listed %d\n", count(dir, seen));
    int dup = 0, missing = 0;
    for (int i = 0; i < 300; i++) { dup += seen[i] > 1; missing += seen[i] == 0; }
    printf("duplicates %d missing %d\n", dup, missing);

    // telldir in the middle, read on, seekdir back: the same name comes again.
    DIR *dp = opendir(dir);
    struct dirent *e;
    int i = 0;
    long mark = -1;
    char at_mark[256] = "";
    while ((e = readdir(dp))) {
        if (i == 150) { mark = telldir(dp); }
        if (i == 151) snprintf(at_mark, sizeof at_mark, "%s", e->d_name);
        i++;
    }
    printf("entries incl dots %d\n", i);
    seekdir(dp, mark);
    e = readdir(dp);
    printf("seekdir returns the same entry: %s\n", e && !strcmp(e->d_name, at_mark) ? "yes" : "no");
    rewinddir(dp);
    int again = 0;
    while (readdir(dp)) again++;
    printf("after rewind %d\n", again);
    closedir(dp);

    for (int i = 0; i < 300; i += 3) {
        snprintf(name, sizeof name, "%s/entry-%03d", dir, i);
        if (unlink(name) < 0) printf("unlink %d: %s\n", i, strerror(errno));
    }
    memset(seen, 0, sizeof seen);
    printf("after unlinking 100: %d\n", count(dir, seen));
    int wrong = 0;
    for (int i = 0; i < 300; i++) wrong += seen[i] != (i % 3 != 0);
    printf("wrong entries %d\n", wrong);
    SHOW_DIR("opendir file", opendir(at(dir, "entry-001")));
    SHOW_DIR("opendir missing", opendir(at(d, "nope")));
    return 0;
}
