// A tour of an export, for running the same guest on a mount reached different ways
// (over vsock from inside a VM, and on a bind mount here) and comparing transcripts:
// reads (a small file, a large one by checksum, through symlinks), a listing, stats of
// missing names (each asked twice, as a compiler's header search does), writes (small,
// large, appended), mkdir, rename, unlink. Expects the tree cli/tests/vsock_vm.rs
// builds; writes under out/, which it creates.
#include "scenario.h"

// FNV-1a over a file's bytes, read in `chunk`-byte reads; -1 when it cannot be read.
static long long checksum(const char *path, size_t chunk, long long *size) {
    static char buf[1 << 16];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    unsigned long long h = 1469598103934665603ULL;
    *size = 0;
    ssize_t n;
    while ((n = read(fd, buf, chunk)) > 0) {
        for (ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)buf[i]) * 1099511628211ULL;
        *size += n;
    }
    close(fd);
    return n < 0 ? -1 : (long long)(h & 0x7fffffffffffffffULL);
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// The entries of `path` but . and .., sorted, one line.
static void show_listing(const char *label, const char *path) {
    DIR *d = opendir(path);
    if (!d) { printf("%s: %s\n", label, strerror(errno)); return; }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_names);
    printf("%s: %d:", label, n);
    for (int i = 0; i < n; i++) { printf(" %s", names[i]); free(names[i]); }
    printf("\n");
}

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/d";
    char buf[256];
    long long size = 0;

    show_file("read hello", at(d, "src/hello.txt"));
    long long sum = checksum(at(d, "src/blob.bin"), 65536, &size);
    printf("blob 64k reads: size %lld fnv %lld\n", size, sum);
    sum = checksum(at(d, "src/blob.bin"), 4096, &size);
    printf("blob 4k reads: size %lld fnv %lld\n", size, sum);

    memset(buf, 0, sizeof buf);
    ssize_t n = readlink(at(d, "src/link"), buf, sizeof buf - 1);
    printf("readlink link: %zd %s\n", n, n >= 0 ? buf : strerror(errno));
    show_file("read via link", at(d, "src/link"));
    show_file("read via dir link", at(d, "src/inc-link/config.h"));
    show_stat("stat via dir link", at(d, "src/inc-link"), 1);
    show_stat("lstat dir link", at(d, "src/inc-link"), 0);
    show_file("read via dangling", at(d, "src/dangling"));

    // A compiler's include search: every header looked for in each -I dir, twice.
    int missing = 0, found = 0, other = 0;
    const char *dirs[] = {"src/inc", "src/sys", "src/gen", "src"};
    for (int pass = 0; pass < 2; pass++)
        for (int h = 0; h < 40; h++)
            for (int i = 0; i < 4; i++) {
                struct stat st;
                char rest[128];
                snprintf(rest, sizeof rest, "%s/header%d.h", dirs[i], h);
                if (stat(at(d, rest), &st) == 0) found++;
                else if (errno == ENOENT) missing++;
                else other++;
            }
    printf("include search: found %d missing %d other %d\n", found, missing, other);
    show_stat("stat missing dir", at(d, "no/such/dir/file.h"), 1);
    SHOW_FD("open missing", open(at(d, "src/nope.h"), O_RDONLY));

    show_listing("list src", at(d, "src"));
    show_listing("list inc", at(d, "src/inc"));

    SHOW("mkdir out", mkdir(at(d, "out"), 0755));
    write_file(at(d, "out/small.txt"), "written from the guest\n");
    show_file("read back small", at(d, "out/small.txt"));
    int fd = open(at(d, "out/big.bin"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) printf("create big: %s\n", strerror(errno));
    else {
        static char chunk[10000];
        for (int i = 0; i < 30; i++) {
            for (size_t j = 0; j < sizeof chunk; j++) chunk[j] = (char)((i * 7 + j) % 251);
            if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) printf("short write big\n");
        }
        close(fd);
    }
    sum = checksum(at(d, "out/big.bin"), 65536, &size);
    printf("big written: size %lld fnv %lld\n", size, sum);
    fd = open(at(d, "out/small.txt"), O_WRONLY | O_APPEND);
    SHOW("append", fd >= 0 ? write(fd, "and appended\n", 13) : -1);
    if (fd >= 0) close(fd);
    show_file("read appended", at(d, "out/small.txt"));
    SHOW("mkdir out/sub", mkdir(at(d, "out/sub"), 0755));
    write_file(at(d, "out/sub/tmp.txt"), "to be renamed");
    SHOW("rename", rename(at(d, "out/sub/tmp.txt"), at(d, "out/renamed.txt")));
    show_stat("old name gone", at(d, "out/sub/tmp.txt"), 1);
    show_file("new name", at(d, "out/renamed.txt"));
    SHOW("symlink", symlink("renamed.txt", at(d, "out/link")));
    show_file("read new link", at(d, "out/link"));
    write_file(at(d, "out/doomed.txt"), "x");
    SHOW("unlink", unlink(at(d, "out/doomed.txt")));
    show_stat("unlinked", at(d, "out/doomed.txt"), 1);
    SHOW("rmdir out/sub", rmdir(at(d, "out/sub")));
    show_listing("list out", at(d, "out"));
    return 0;
}
