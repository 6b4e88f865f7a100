// Sequential file throughput, timed inside the guest:
//   throughput read FILE BUFSIZE          reads FILE to its end
//   throughput write FILE MIB BUFSIZE     writes MIB MiB (then closes: write-back flushed)
// Prints `read|write BYTES BYTES_PER_SECOND CHECKSUM`; the checksum (a sum of 64-bit
// words) lets the harness check that the bytes are the file's.
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t sum_words(const unsigned char *p, size_t n) {
    uint64_t sum = 0, w;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        sum += w;
    }
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: throughput read FILE BUFSIZE | write FILE MIB BUFSIZE\n");
        return 2;
    }
    int writing = strcmp(argv[1], "write") == 0;
    size_t bufsize = (size_t)atol(argv[writing ? 4 : 3]);
    unsigned char *buf = malloc(bufsize);
    if (!buf || bufsize % 8) {
        fprintf(stderr, "bad BUFSIZE\n");
        return 2;
    }
    uint64_t total = 0, sum = 0;
    double start = now();
    if (writing) {
        uint64_t want = (uint64_t)atol(argv[3]) << 20;
        int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) {
            perror("open");
            return 1;
        }
        for (size_t i = 0; i < bufsize; i++) buf[i] = (unsigned char)(i * 7 + 1);
        while (total < want) {
            ssize_t n = write(fd, buf, bufsize);
            if (n != (ssize_t)bufsize) {
                perror("write");
                return 1;
            }
            sum += sum_words(buf, bufsize);
            total += n;
        }
        if (close(fd) != 0) {
            perror("close");
            return 1;
        }
    } else {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0) {
            perror("open");
            return 1;
        }
        ssize_t n;
        while ((n = read(fd, buf, bufsize)) > 0) {
            sum += sum_words(buf, (size_t)n);
            total += n;
        }
        if (n < 0) {
            perror("read");
            return 1;
        }
        close(fd);
    }
    double took = now() - start;
    printf("%s %llu %.0f %llu\n", writing ? "write" : "read", (unsigned long long)total,
           total / took, (unsigned long long)sum);
    return 0;
}
