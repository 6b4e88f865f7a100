// A compiler's header search: for each name given, try each include directory in
// turn (stat, as clang does), and print where it was found, following and printing
// symlinks, with a checksum of its contents (read in 4 KiB pieces). Arguments:
// DIR... -- NAME...
#include "scenario.h"

static unsigned long checksum(const char *path, long *size) {
    unsigned long h = 5381;
    char buf[4096];
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++) h = h * 33 + (unsigned char)buf[i];
        *size += n;
    }
    close(fd);
    return n < 0 ? 0 : h;
}

int main(int argc, char **argv) {
    int sep = 1;
    while (sep < argc && strcmp(argv[sep], "--") != 0) sep++;
    for (int i = sep + 1; i < argc; i++) {
        const char *found = NULL;
        for (int d = 1; d < sep && !found; d++) {
            const char *p = at(argv[d], argv[i]);
            struct stat st;
            if (stat(p, &st) == 0) found = p;
            else if (errno != ENOENT) printf("%s: %s\n", p, strerror(errno));
        }
        if (!found) {
            printf("%s: not found\n", argv[i]);
            continue;
        }
        char target[512];
        ssize_t t = readlink(found, target, sizeof target - 1);
        if (t >= 0) target[t] = 0;
        long size;
        unsigned long h = checksum(found, &size);
        printf("%s: %s%s%s %ld bytes %lx\n", argv[i], found, t >= 0 ? " -> " : "",
               t >= 0 ? target : "", size, h);
    }
    return 0;
}
