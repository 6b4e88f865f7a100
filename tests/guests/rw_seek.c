// open/read/write/seek: offsets, holes, append, truncate-on-open, exclusive create,
// and the errors for reading a write-only file or writing a directory.
#include "scenario.h"

int main(int argc, char **argv) {
    const char *d = argc > 1 ? argv[1] : "/data";
    char buf[128];
    const char *f = at(d, "rw.txt");
    int fd = open(f, O_RDWR | O_CREAT | O_EXCL, 0644);
    SHOW("create", fd >= 0 ? 0 : -1);
    SHOW("write 1", write(fd, "hello ", 6));
    SHOW("write 2", write(fd, "world", 5));
    SHOW("tell", lseek(fd, 0, SEEK_CUR));
    SHOW("seek set 6", lseek(fd, 6, SEEK_SET));
    memset(buf, 0, sizeof buf);
    SHOW("read 5", read(fd, buf, 5));
    printf("got \"%s\"\n", buf);
    SHOW("read at eof", read(fd, buf, 5));
    SHOW("seek cur -5", lseek(fd, -5, SEEK_CUR));
    SHOW("seek end", lseek(fd, 0, SEEK_END));
    SHOW("seek before start", lseek(fd, -100, SEEK_SET));
    SHOW("pwrite 0", pwrite(fd, "J", 1, 0));
    SHOW("pwrite hole", pwrite(fd, "!", 1, 20));
    memset(buf, 'x', sizeof buf);
    SHOW("pread all", pread(fd, buf, sizeof buf, 0));
    for (int i = 0; i < 21; i++) printf("%c", buf[i] ? buf[i] : '0');
    printf("\n");
    SHOW("tell after pread", lseek(fd, 0, SEEK_CUR));
    SHOW("close", close(fd));
    SHOW("close again", close(fd));
    SHOW_FD("create excl existing", open(f, O_RDWR | O_CREAT | O_EXCL, 0644));

    fd = open(f, O_WRONLY | O_APPEND);
    SHOW("append", write(fd, "+end", 4));
    SHOW("read write-only", read(fd, buf, 4));
    close(fd);
    show_stat("stat", f, 1);
    show_file("contents", f);

    fd = open(f, O_WRONLY | O_TRUNC);
    SHOW("open trunc", fd >= 0 ? 0 : -1);
    SHOW("write after trunc", write(fd, "new", 3));
    close(fd);
    show_file("truncated", f);

    fd = open(f, O_RDONLY);
    SHOW("write read-only", write(fd, "x", 1));
    close(fd);
    SHOW_FD("open dir for writing", open(d, O_WRONLY));
    SHOW_FD("open missing", open(at(d, "missing.txt"), O_RDONLY));
    SHOW_FD("open file as dir", open(at(d, "rw.txt/x"), O_RDONLY));

    // A bigger file, read back in odd pieces.
    fd = open(at(d, "big.bin"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    static char big[300000];
    for (int i = 0; i < (int)sizeof big; i++) big[i] = (char)(i * 7 + i / 1000);
    SHOW("write big", write(fd, big, sizeof big));
    SHOW("seek 0", lseek(fd, 0, SEEK_SET));
    long sum = 0, total = 0;
    ssize_t n;
    while ((n = read(fd, buf, 97)) > 0) {
        for (int i = 0; i < n; i++) sum = (sum * 31 + (unsigned char)buf[i]) % 1000000007;
        total += n;
    }
    printf("read back %ld bytes, checksum %ld\n", total, sum);
    close(fd);
    return 0;
}
