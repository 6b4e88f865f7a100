// WASI calls beyond plain file I/O, each with what Linux would answer: fsync of a
// directory, posix_fallocate (grows, never shrinks), clearing O_APPEND with fcntl,
// linkat with and without AT_SYMLINK_FOLLOW, random_get of more than 16 MiB, and
// poll_oneoff reporting every subscription that is ready.
#include <wasi/api.h>

#include "scenario.h"

static long long size_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";

    // The usual durable rename: write, fsync the file, rename, fsync the directory.
    write_file(at(d, "tmp"), "durable");
    SHOW("rename", rename(at(d, "tmp"), at(d, "final")));
    int dir = open(d, O_RDONLY | O_DIRECTORY);
    SHOW("fsync dir", fsync(dir));
    SHOW("fdatasync dir", fdatasync(dir));
    close(dir);

    // posix_fallocate: the file is at least offset+len long, and never shrinks.
    int fd = open(at(d, "alloc"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    SHOW("write", write(fd, "abc", 3));
    printf("fallocate grow: %d\n", posix_fallocate(fd, 0, 4096));
    printf("  size %lld\n", size_of(at(d, "alloc")));
    printf("fallocate inside: %d\n", posix_fallocate(fd, 10, 10));
    printf("  size %lld\n", size_of(at(d, "alloc")));
    char head[4] = {0};
    SHOW("pread head", pread(fd, head, 3, 0));
    printf("  kept \"%s\"\n", head);
    close(fd);
    int ro = open(at(d, "alloc"), O_RDONLY);
    printf("fallocate read-only: %d\n", posix_fallocate(ro, 0, 8192));
    close(ro);

    // O_APPEND on, then off: later writes go where the offset is.
    fd = open(at(d, "log"), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    SHOW("append 1", write(fd, "one", 3));
    SHOW("seek 0", lseek(fd, 0, SEEK_SET));
    SHOW("append 2", write(fd, "two", 3));
    printf("append flag: %s\n", fcntl(fd, F_GETFL) & O_APPEND ? "on" : "off");
    SHOW("clear append", fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_APPEND));
    printf("append flag: %s\n", fcntl(fd, F_GETFL) & O_APPEND ? "on" : "off");
    SHOW("seek 0", lseek(fd, 0, SEEK_SET));
    SHOW("overwrite", write(fd, "ONE", 3));
    close(fd);
    show_file("log", at(d, "log"));
    // Two appenders through two opens: neither overwrites the other.
    int one = open(at(d, "shared.log"), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int two = open(at(d, "shared.log"), O_WRONLY | O_APPEND);
    SHOW("append a", write(one, "a", 1));
    SHOW("append b", write(two, "b", 1));
    SHOW("append c", write(one, "c", 1));
    close(one);
    close(two);
    show_file("two appenders", at(d, "shared.log"));

    // linkat: without AT_SYMLINK_FOLLOW the link itself is linked, with it its target.
    write_file(at(d, "target"), "linked");
    SHOW("symlink", symlink("target", at(d, "sym")));
    SHOW("link nofollow", linkat(AT_FDCWD, at(d, "sym"), AT_FDCWD, at(d, "hard-sym"), 0));
    show_stat("  hard-sym", at(d, "hard-sym"), 0);
    SHOW("link follow", linkat(AT_FDCWD, at(d, "sym"), AT_FDCWD, at(d, "hard-target"), AT_SYMLINK_FOLLOW));
    show_stat("  hard-target", at(d, "hard-target"), 0);
    show_file("  reads", at(d, "hard-target"));
    SHOW("symlink dangling", symlink("nowhere", at(d, "dangling")));
    SHOW("link follow dangling", linkat(AT_FDCWD, at(d, "dangling"), AT_FDCWD, at(d, "x"), AT_SYMLINK_FOLLOW));

    // random_get of 20 MiB fills all of it: no zero page at the end.
    size_t big = 20u << 20;
    unsigned char *buf = calloc(big, 1);
    printf("random_get 20 MiB: %d\n", __wasi_random_get(buf, big));
    int zero_pages = 0;
    for (size_t page = 0; page < big; page += 4096) {
        int all_zero = 1;
        for (size_t i = page; i < page + 4096; i++) {
            if (buf[i]) { all_zero = 0; break; }
        }
        zero_pages += all_zero;
    }
    printf("  zero pages: %d\n", zero_pages);
    free(buf);

    // poll_oneoff: two expired clocks and a writable stdout are all reported at once.
    __wasi_subscription_t subs[3];
    memset(subs, 0, sizeof subs);
    for (int i = 0; i < 2; i++) {
        subs[i].userdata = 10 + i;
        subs[i].u.tag = __WASI_EVENTTYPE_CLOCK;
        subs[i].u.u.clock.id = __WASI_CLOCKID_MONOTONIC;
        subs[i].u.u.clock.timeout = 0;
    }
    subs[2].userdata = 20;
    subs[2].u.tag = __WASI_EVENTTYPE_FD_WRITE;
    subs[2].u.u.fd_write.file_descriptor = 1;
    __wasi_event_t events[3];
    __wasi_size_t n = 0;
    printf("poll: %d\n", __wasi_poll_oneoff(subs, events, 3, &n));
    int seen = 0;
    for (__wasi_size_t i = 0; i < n; i++) seen |= 1 << (events[i].userdata - 10);
    printf("  events %u, clocks %s, stdout %s\n", (unsigned)n,
           (seen & 3) == 3 ? "both" : "not both", seen & (1 << 10) ? "yes" : "no");
    // One clock in the future and one expired: only the expired one.
    subs[1].u.u.clock.timeout = 60ull * 1000 * 1000 * 1000;
    printf("poll: %d\n", __wasi_poll_oneoff(subs, events, 2, &n));
    printf("  events %u, first %llu\n", (unsigned)n, (unsigned long long)events[0].userdata);
    return 0;
}
