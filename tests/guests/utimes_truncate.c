// Timestamps set to given values (utimensat, futimens, UTIME_OMIT, UTIME_NOW) and
// sizes changed (truncate up and down, ftruncate), checked by stat and by reading.
#include <sys/time.h>
#include <wasi/api.h>
#include <time.h>
#include "scenario.h"

static void show_times(const char *label, const char *path) {
    struct stat st;
    if (stat(path, &st) < 0) { printf("%s: %s\n", label, strerror(errno)); return; }
    printf("%s: mtime %lld.%09ld atime %lld.%09ld\n", label, (long long)st.st_mtim.tv_sec,
           st.st_mtim.tv_nsec, (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec);
}

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
    const char *f = at(d, "t.txt");
    write_file(f, "0123456789");
    struct timespec ts[2] = {{1000000000, 123456789}, {1234567890, 987654321}};
    SHOW("utimensat", utimensat(AT_FDCWD, f, ts, 0));
    show_times("set", f);
    struct timespec omit[2] = {{0, UTIME_OMIT}, {1500000000, 5}};
    SHOW("utimensat omit atime", utimensat(AT_FDCWD, f, omit, 0));
    show_times("mtime only", f);
    int fd = open(f, O_RDWR);
    struct timespec both[2] = {{1600000000, 0}, {1700000000, 0}};
    SHOW("futimens", futimens(fd, both));
    show_times("by fd", f);
    // This wasi-libc rejects an explicit UTIME_NOW and turns NULL into time 0, so ask
    // WASI for "now" directly.
    SHOW("utime now", __wasi_fd_filestat_set_times(fd, 0, 0, __WASI_FSTFLAGS_ATIM_NOW | __WASI_FSTFLAGS_MTIM_NOW));
    struct stat st;
    stat(f, &st);
    printf("now is recent: %s\n", st.st_mtim.tv_sec > 1700000000 ? "yes" : "no");
    SHOW("futimens back", futimens(fd, both));
    SHOW("utimensat missing", utimensat(AT_FDCWD, at(d, "missing"), ts, 0));
    SHOW("symlink", symlink("t.txt", at(d, "t.link")));
    SHOW("utimensat nofollow", utimensat(AT_FDCWD, at(d, "t.link"), ts, AT_SYMLINK_NOFOLLOW));
    show_times("target untouched by nofollow", f);

    SHOW("truncate down", truncate(f, 4));
    show_stat("size", f, 1);
    show_file("contents", f);
    SHOW("truncate up", truncate(f, 12));
    show_stat("size", f, 1);
    char buf[32];
    SHOW("pread", pread(fd, buf, sizeof buf, 0));
    for (int i = 0; i < 12; i++) printf("%c", buf[i] ? buf[i] : '0');
    printf("\n");
    SHOW("ftruncate", ftruncate(fd, 2));
    show_file("after ftruncate", f);
    SHOW("write at old end", pwrite(fd, "Z", 1, 5));
    show_stat("size", f, 1);
    SHOW("pread", pread(fd, buf, sizeof buf, 0));
    for (int i = 0; i < 6; i++) printf("%c", buf[i] ? buf[i] : '0');
    printf("\n");
    close(fd);
    fd = open(f, O_RDONLY);
    SHOW("ftruncate read-only", ftruncate(fd, 0));
    close(fd);
    SHOW("truncate a dir", truncate(d, 0));
    SHOW("truncate missing", truncate(at(d, "missing"), 0));
    SHOW("truncate negative", truncate(f, -1));
    // A file truncated through its descriptor after its name is gone.
    fd = open(at(d, "doomed"), O_RDWR | O_CREAT, 0644);
    SHOW("write doomed", write(fd, "0123456789", 10));
    SHOW("unlink doomed", unlink(at(d, "doomed")));
    SHOW("ftruncate unlinked", ftruncate(fd, 4));
    SHOW("fstat unlinked", fstat(fd, &st) == 0 ? (long)st.st_size : -1);
    SHOW("pread unlinked", pread(fd, buf, sizeof buf, 0));
    close(fd);
    return 0;
}
