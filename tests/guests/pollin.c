// poll() on stdin: with nothing to read it times out; once input comes it is ready.
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
    struct pollfd p = {0, POLLIN, 0};
    int r = poll(&p, 1, 200);
    printf("first poll: %d\n", r);
    fflush(stdout);
    r = poll(&p, 1, 20000);
    printf("second poll: %d readable %d\n", r, (p.revents & POLLIN) != 0);
    char buf[16] = {0};
    ssize_t n = read(0, buf, sizeof buf - 1);
    printf("read %zd: %s", n, buf);
    return 0;
}
