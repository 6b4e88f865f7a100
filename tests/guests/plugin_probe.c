// For cli/tests/plugins.rs: each argument is a step, run in order and reported on
// one line each. "read:PATH" prints the file's contents or the error; "write:PATH:TEXT"
// creates PATH with TEXT and reads it back; "wait:PATH:TEXT" waits (up to 20 s) until
// PATH exists and holds TEXT, as another guest writes it.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int slurp(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -errno;
    ssize_t n = read(fd, buf, cap - 1);
    int e = errno;
    close(fd);
    if (n < 0) return -e;
    buf[n] = 0;
    return (int)n;
}

int main(int argc, char **argv) {
    char buf[4096];
    for (int i = 1; i < argc; i++) {
        char *step = argv[i];
        char *path = strchr(step, ':');
        if (!path) return 2;
        *path++ = 0;
        char *text = strchr(path, ':');
        if (text) *text++ = 0;
        if (strcmp(step, "read") == 0) {
            int n = slurp(path, buf, sizeof buf);
            if (n < 0) printf("read %s: %s\n", path, strerror(-n));
            else printf("read %s: %s", path, buf);
        } else if (strcmp(step, "write") == 0 && text) {
            int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || close(fd) != 0) {
                printf("write %s: %s\n", path, strerror(errno));
                continue;
            }
            int n = slurp(path, buf, sizeof buf);
            printf("write %s: %s\n", path, n >= 0 && strcmp(buf, text) == 0 ? "read back" : "DIFFERS");
        } else if (strcmp(step, "wait") == 0 && text) {
            int seen = 0;
            for (int tries = 0; tries < 2000 && !seen; tries++) {
                seen = slurp(path, buf, sizeof buf) >= 0 && strcmp(buf, text) == 0;
                if (!seen) {
                    struct timespec ts = {0, 10 * 1000 * 1000};
                    nanosleep(&ts, NULL);
                }
            }
            printf("wait %s: %s\n", path, seen ? "seen" : "TIMED OUT");
        } else {
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}
