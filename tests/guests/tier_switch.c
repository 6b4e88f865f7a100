// A batch guest for cli/tests/tiers.rs:
//   tier_switch wait DIR   waits (at most 300 s) until DIR holds two compiled
//                          artifacts (*.cwasm: both tiers), then 2 s more, and exits 0
//                          (1 on timeout);
//   tier_switch sum N      prints a checksum of N rounds of integer mixing.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int artifacts(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".cwasm") == 0) n++;
    }
    closedir(d);
    return n;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "wait") == 0) {
        for (int i = 0; i < 3000; i++) {
            if (artifacts(argv[2]) >= 2) {
                sleep_ms(2000);
                return 0;
            }
            sleep_ms(100);
        }
        fprintf(stderr, "no second artifact in %s\n", argv[2]);
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "sum") == 0) {
        unsigned h = 2166136261u;
        long rounds = atol(argv[2]);
        for (long i = 0; i < rounds; i++) h = (h ^ (unsigned)i) * 16777619u;
        printf("%u\n", h);
        return 0;
    }
    fprintf(stderr, "usage: tier_switch wait DIR | sum N\n");
    return 2;
}
