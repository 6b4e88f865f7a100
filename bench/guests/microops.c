// Micro-operations a compiler's header search is made of, timed inside the guest:
//   microops DIR ITERATIONS
// DIR holds `present.h` and `link.h -> present.h` (made by bench/guest-ops; the guest
// makes them itself where DIR starts without them, as a plugin mount does). Each op
// runs ITERATIONS/10 times untimed (so a caching mount is warm), then ITERATIONS times
// timed with the monotonic clock. Prints one line per op: `NAME OPS_PER_SECOND`.
// Exits 1 if an op does not behave (a missing name found, a wrong link target).
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char missing[512], link_path[512], present[512];

static int stat_missing(void) {
    struct stat st;
    return stat(missing, &st) == -1 && errno == ENOENT;
}

static int readlink_cached(void) {
    char buf[64];
    ssize_t n = readlink(link_path, buf, sizeof buf);
    return n == 9 && memcmp(buf, "present.h", 9) == 0;
}

static int open_close(void) {
    int fd = open(present, O_RDONLY);
    return fd >= 0 && close(fd) == 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int measure(const char *name, int (*op)(void), long iterations) {
    for (long i = 0; i < iterations / 10 + 1; i++) {
        if (!op()) {
            fprintf(stderr, "%s: wrong result (errno %d)\n", name, errno);
            return 1;
        }
    }
    double start = now();
    for (long i = 0; i < iterations; i++) {
        if (!op()) {
            fprintf(stderr, "%s: wrong result at %ld (errno %d)\n", name, i, errno);
            return 1;
        }
    }
    double took = now() - start;
    printf("%s %.0f\n", name, iterations / took);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: microops DIR ITERATIONS\n");
        return 2;
    }
    long iterations = atol(argv[2]);
    snprintf(missing, sizeof missing, "%s/missing.h", argv[1]);
    snprintf(link_path, sizeof link_path, "%s/link.h", argv[1]);
    snprintf(present, sizeof present, "%s/present.h", argv[1]);
    if (access(present, F_OK) != 0) {
        int fd = open(present, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 || write(fd, "#pragma once\n", 13) != 13 || close(fd) != 0 ||
            symlink("present.h", link_path) != 0) {
            fprintf(stderr, "cannot make %s and %s: %s\n", present, link_path, strerror(errno));
            return 1;
        }
    }
    return measure("stat-missing", stat_missing, iterations) ||
           measure("readlink", readlink_cached, iterations) ||
           measure("open-close", open_close, iterations / 4);
}
