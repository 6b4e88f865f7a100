// A guest that exercises the filesystem calls a compiler-like program makes, printing
// one line per step so that runs on different mounts can be compared byte for byte.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void list(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) { printf("opendir %s: %s\n", dir, strerror(errno)); return; }
    char *names[256]; int n = 0; struct dirent *e;
    while ((e = readdir(d)) && n < 256) names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof names[0], cmp);
    printf("ls %s:", dir);
    for (int i = 0; i < n; i++) { printf(" %s", names[i]); free(names[i]); }
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: fileops DIR\n"); return 2; }
    const char *root = argv[1];
    char path[512], path2[512], buf[4096];
    printf("args %d %s env %s\n", argc, argv[0], getenv("WASM9P_TEST") ? getenv("WASM9P_TEST") : "(none)");

    snprintf(path, sizeof path, "%s/hello.txt", root);
    FILE *f = fopen(path, "r");
    if (!f) { printf("fopen %s: %s\n", path, strerror(errno)); return 3; }
    size_t n = fread(buf, 1, sizeof buf - 1, f); buf[n] = 0; fclose(f);
    printf("read %zu bytes: %s", n, buf);

    struct stat st;
    snprintf(path, sizeof path, "%s/include/missing.h", root);
    for (int i = 0; i < 3; i++) printf("stat missing: %d %s\n", stat(path, &st), strerror(errno));

    snprintf(path, sizeof path, "%s/out", root);
    printf("mkdir: %d\n", mkdir(path, 0755));
    snprintf(path, sizeof path, "%s/out/obj.o", root);
    f = fopen(path, "w");
    for (int i = 0; i < 11000; i++) { fputc('a' + i % 26, f); fflush(f); }
    printf("fclose: %d\n", fclose(f));
    printf("stat obj: %d size %lld\n", stat(path, &st), (long long)st.st_size);

    int fd = open(path, O_RDONLY);
    printf("lseek end: %lld\n", (long long)lseek(fd, 0, SEEK_END));
    printf("lseek 100: %lld\n", (long long)lseek(fd, 100, SEEK_SET));
    n = read(fd, buf, 5); buf[n] = 0;
    printf("pread: %s\n", buf);
    close(fd);

    snprintf(path2, sizeof path2, "%s/out/link", root);
    printf("symlink: %d\n", symlink("obj.o", path2));
    n = readlink(path2, buf, sizeof buf); buf[n > 0 ? n : 0] = 0;
    printf("readlink: %s\n", buf);
    printf("stat via link: %d size %lld\n", stat(path2, &st), (long long)st.st_size);
    snprintf(path2, sizeof path2, "%s/out/renamed.o", root);
    printf("rename: %d\n", rename(path, path2));
    printf("access old: %d\n", access(path, F_OK));
    snprintf(path, sizeof path, "%s/out", root);
    list(path);
    list(root);
    snprintf(path, sizeof path, "%s/out/link", root);
    printf("unlink link: %d\n", unlink(path));
    printf("unlink obj: %d\n", unlink(path2));
    snprintf(path, sizeof path, "%s/out", root);
    printf("rmdir: %d\n", rmdir(path));
    printf("rmdir again: %d %s\n", rmdir(path), strerror(errno));
    printf("escape: %d\n", access("/../../../../etc/passwd", F_OK));
    return argc > 2 ? atoi(argv[2]) : 0;
}
