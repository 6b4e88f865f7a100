// A compiler's header search: for each name given, try each include directory in
// turn (stat, as clang does), and print where it was found, following and printing
// symlinks, with a checksum of its contents (read in 4 KiB pieces); a NAME ending in
// `/` is a directory to list (its names, sorted). Arguments: DIR... -- NAME...
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

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// Lists the first DIR/NAME that opens; 1 if one did.
static int list(char **dirs, int ndirs, const char *name) {
    for (int d = 0; d < ndirs; d++) {
        DIR *dir = opendir(at(dirs[d], name));
        if (!dir) continue;
        char *names[256];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(dir)) && n < 256)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[n++] = strdup(e->d_name);
        closedir(dir);
        qsort(names, n, sizeof names[0], by_name);
        printf("%s: %s%s", name, dirs[d], n ? ":" : " (empty)");
        for (int i = 0; i < n; i++) printf(" %s", names[i]);
        printf("\n");
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int sep = 1;
    while (sep < argc && strcmp(argv[sep], "--") != 0) sep++;
    for (int i = sep + 1; i < argc; i++) {
        size_t len = strlen(argv[i]);
        if (len && argv[i][len - 1] == '/') {
            if (!list(argv + 1, sep - 1, argv[i])) printf("%s: not found\n", argv[i]);
            continue;
        }
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
