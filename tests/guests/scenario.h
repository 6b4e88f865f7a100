// Shared by the scenario guests: print each step's result so that runs on different
// mounts can be compared line by line (never inode numbers or current times).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Runs `expr`, printing its value, and errno's name when it is negative.
#define SHOW(label, expr)                                                          \
    do {                                                                           \
        errno = 0;                                                                 \
        long r_ = (long)(expr);                                                    \
        printf("%s: %ld%s%s\n", label, r_, r_ < 0 ? " " : "", r_ < 0 ? strerror(errno) : ""); \
    } while (0)

// Runs `expr`, an fd or a pointer: "ok" (closing the fd), or errno's name.
#define SHOW_FD(label, expr)                                                       \
    do {                                                                           \
        errno = 0;                                                                 \
        long r_ = (long)(expr);                                                    \
        if (r_ >= 0) { close((int)r_); printf("%s: ok\n", label); }               \
        else printf("%s: %s\n", label, strerror(errno));                           \
    } while (0)
#define SHOW_DIR(label, expr)                                                      \
    do {                                                                           \
        errno = 0;                                                                 \
        DIR *d_ = (expr);                                                          \
        if (d_) { closedir(d_); printf("%s: ok\n", label); }                      \
        else printf("%s: %s\n", label, strerror(errno));                           \
    } while (0)

static char path_buf[8][1024];
static int path_next;

// "root/rest" in one of a few rotating buffers.
static const char *at(const char *root, const char *rest) {
    char *p = path_buf[path_next++ % 8];
    snprintf(p, sizeof path_buf[0], "%s/%s", root, rest);
    return p;
}

__attribute__((unused)) static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { printf("create %s: %s\n", path, strerror(errno)); return; }
    if (write(fd, text, strlen(text)) != (ssize_t)strlen(text)) printf("short write %s\n", path);
    close(fd);
}

// Prints the file's contents (up to 200 bytes), or why it cannot be read.
__attribute__((unused)) static void show_file(const char *label, const char *path) {
    char buf[256];
    int fd = open(path, O_RDONLY);
    if (fd < 0) { printf("%s: open %s\n", label, strerror(errno)); return; }
    ssize_t n = read(fd, buf, 200);
    close(fd);
    if (n < 0) { printf("%s: read %s\n", label, strerror(errno)); return; }
    buf[n] = 0;
    printf("%s: %zd \"%s\"\n", label, n, buf);
}

__attribute__((unused)) static const char *type_name(mode_t m) {
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

__attribute__((unused)) static void show_stat(const char *label, const char *path, int follow) {
    struct stat st;
    int r = follow ? stat(path, &st) : lstat(path, &st);
    if (r < 0) printf("%s: %s\n", label, strerror(errno));
    else printf("%s: %s size %lld\n", label, type_name(st.st_mode), S_ISDIR(st.st_mode) ? 0LL : (long long)st.st_size);
}
