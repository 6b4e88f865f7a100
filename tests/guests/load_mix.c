// One guest of the load test: N mixed operations on its own files under ROOT/gID and on
// its own slots of the shared files ROOT/shared/sK, checked against an in-memory model
// as it goes. At the end it prints one line per file it owns, "file PATH SIZE HASH",
// and one per shared slot, "slot PATH OFFSET SIZE HASH" (FNV-1a 64), for the host to
// check against what the server holds. Exit 0 when every check passed; otherwise the
// first mismatch is printed and the exit is 1.
//
// usage: load_mix ROOT ID OPS SEED
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILES 6
#define SHARED 4
#define SLOT 4096
#define MAXSIZE 40000

static uint64_t rng;
static unsigned next(unsigned below) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % below);
}

static uint64_t fnv(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static const char *root;
static int id;
static char dir[256];

// The model: each owned file's name (it moves when renamed) and contents.
static char names[FILES][64];
static unsigned char *data[FILES];
static size_t sizes[FILES];
static int exists[FILES];
static unsigned char slots[SHARED][SLOT];

static void fail(const char *what, const char *path) {
    printf("FAIL %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

static const char *file_path(int f) {
    static char p[4][320];
    static int k;
    char *out = p[k++ % 4];
    snprintf(out, sizeof p[0], "%s/%s", dir, names[f]);
    return out;
}

static void fill(unsigned char *buf, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)next(256);
}

static void write_all(int fd, const unsigned char *buf, size_t n, const char *path) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w <= 0) fail("write", path);
        done += (size_t)w;
    }
}

static void check_file(int f) {
    const char *path = file_path(f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) fail("open for check", path);
    unsigned char *buf = malloc(sizes[f] + 1);
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, sizes[f] + 1 - got);
        if (r < 0) fail("read", path);
        if (r == 0 || got + (size_t)r > sizes[f]) { got += (size_t)r; break; }
        got += (size_t)r;
    }
    close(fd);
    if (got != sizes[f] || memcmp(buf, data[f], sizes[f]) != 0) {
        printf("FAIL content %s: %zu bytes, expected %zu\n", path, got, sizes[f]);
        exit(1);
    }
    free(buf);
}

static void rewrite(int f) {
    const char *path = file_path(f);
    size_t n = 1 + next(MAXSIZE);
    data[f] = realloc(data[f], n);
    fill(data[f], n);
    sizes[f] = n;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("create", path);
    // Small pieces, as compilers write.
    for (size_t off = 0; off < n;) {
        size_t piece = 1 + next(3000);
        if (piece > n - off) piece = n - off;
        write_all(fd, data[f] + off, piece, path);
        off += piece;
    }
    if (close(fd) != 0) fail("close", path);
    exists[f] = 1;
}

static void append(int f) {
    const char *path = file_path(f);
    size_t add = 1 + next(2000);
    if (sizes[f] + add > MAXSIZE * 2) return rewrite(f);
    data[f] = realloc(data[f], sizes[f] + add);
    fill(data[f] + sizes[f], add);
    int fd = open(path, O_WRONLY | O_APPEND);
    if (fd < 0) fail("open append", path);
    write_all(fd, data[f] + sizes[f], add, path);
    if (close(fd) != 0) fail("close", path);
    sizes[f] += add;
}

static void overwrite_middle(int f) {
    const char *path = file_path(f);
    if (sizes[f] < 2) return;
    size_t off = next((unsigned)sizes[f] - 1);
    size_t n = 1 + next((unsigned)(sizes[f] - off));
    fill(data[f] + off, n);
    int fd = open(path, O_RDWR);
    if (fd < 0) fail("open rdwr", path);
    if (pwrite(fd, data[f] + off, n, (off_t)off) != (ssize_t)n) fail("pwrite", path);
    if (close(fd) != 0) fail("close", path);
}

static void truncate_file(int f) {
    const char *path = file_path(f);
    size_t n = next((unsigned)sizes[f] + 1);
    if (truncate(path, (off_t)n) != 0) fail("truncate", path);
    sizes[f] = n;
}

static void rename_file(int f) {
    char old[320];
    snprintf(old, sizeof old, "%s", file_path(f));
    snprintf(names[f], sizeof names[f], "f%d-%u", f, next(1000000));
    if (rename(old, file_path(f)) != 0) fail("rename", old);
}

static void unlink_file(int f) {
    if (unlink(file_path(f)) != 0) fail("unlink", file_path(f));
    exists[f] = 0;
    sizes[f] = 0;
}

static void stat_checks(int f) {
    struct stat st;
    if (stat(file_path(f), &st) != 0) fail("stat", file_path(f));
    if ((size_t)st.st_size != sizes[f]) {
        printf("FAIL size %s: %lld, expected %zu\n", file_path(f), (long long)st.st_size, sizes[f]);
        exit(1);
    }
    char missing[320];
    snprintf(missing, sizeof missing, "%s/missing-%u.h", dir, next(50));
    if (stat(missing, &st) == 0 || errno != ENOENT) fail("stat of a missing name", missing);
}

static void list_dir(void) {
    DIR *d = opendir(dir);
    if (!d) fail("opendir", dir);
    int seen = 0, expected = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        for (int f = 0; f < FILES; f++)
            if (exists[f] && strcmp(e->d_name, names[f]) == 0) seen++;
    }
    closedir(d);
    for (int f = 0; f < FILES; f++) expected += exists[f];
    if (seen != expected) {
        printf("FAIL readdir %s: %d of %d files\n", dir, seen, expected);
        exit(1);
    }
}

static void shared_slot(void) {
    int k = (int)next(SHARED);
    char path[320];
    snprintf(path, sizeof path, "%s/shared/s%d", root, k);
    size_t off = next(SLOT - 1);
    size_t n = 1 + next((unsigned)(SLOT - off));
    fill(slots[k] + off, n);
    int fd = open(path, O_RDWR);
    if (fd < 0) fail("open shared", path);
    off_t base = (off_t)id * SLOT;
    if (pwrite(fd, slots[k] + off, n, base + (off_t)off) != (ssize_t)n) fail("pwrite shared", path);
    unsigned char back[SLOT];
    if (pread(fd, back, SLOT, base) != SLOT) fail("pread shared", path);
    if (memcmp(back, slots[k], SLOT) != 0) {
        printf("FAIL shared %s slot %d: differs from what this guest wrote\n", path, id);
        exit(1);
    }
    if (close(fd) != 0) fail("close shared", path);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: load_mix ROOT ID OPS SEED\n");
        return 2;
    }
    root = argv[1];
    id = atoi(argv[2]);
    int ops = atoi(argv[3]);
    rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)strtoull(argv[4], 0, 10) << 8) ^ (uint64_t)id;
    snprintf(dir, sizeof dir, "%s/g%d", root, id);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) fail("mkdir", dir);
    for (int f = 0; f < FILES; f++) snprintf(names[f], sizeof names[f], "f%d", f);
    for (int i = 0; i < ops; i++) {
        int f = (int)next(FILES);
        unsigned op = next(100);
        if (!exists[f]) { rewrite(f); continue; }
        if (op < 15) rewrite(f);
        else if (op < 27) append(f);
        else if (op < 37) overwrite_middle(f);
        else if (op < 42) truncate_file(f);
        else if (op < 50) rename_file(f);
        else if (op < 53) unlink_file(f);
        else if (op < 65) check_file(f);
        else if (op < 80) stat_checks(f);
        else if (op < 85) list_dir();
        else shared_slot();
    }
    for (int f = 0; f < FILES; f++) {
        if (!exists[f]) continue;
        check_file(f);
        printf("file g%d/%s %zu %016llx\n", id, names[f], sizes[f],
               (unsigned long long)fnv(data[f], sizes[f]));
    }
    for (int k = 0; k < SHARED; k++)
        printf("slot shared/s%d %d %d %016llx\n", k, id * SLOT, SLOT,
               (unsigned long long)fnv(slots[k], SLOT));
    return 0;
}
