/* A guest for the worker's tests, one job per mode:
 *   write PATH TEXT    writes TEXT to PATH (its directories made first), prints
 *                      "wrote PATH"
 *   read PATH          prints PATH's bytes
 *   cat PATH...        prints each PATH's bytes in turn
 *   sleep SECONDS      sleeps (one WASI call), prints "slept"
 *   spin               computes for ever without a WASI call
 *   alloc MIB          touches MIB MiB of memory, prints "allocated"
 *   exit CODE          prints to stderr and exits CODE
 *   say TEXT CODE      prints TEXT to stderr and exits CODE
 *   flood BYTES MIB    prints BYTES bytes to stderr, then touches MIB MiB of memory
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Copies the file at `path` to stdout: 0, or 1 after saying why it could not. */
static int print_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 1;
    }
    int c;
    while ((c = fgetc(f)) != EOF)
        putchar(c);
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: farm_action MODE ...\n");
        return 2;
    }
    const char *mode = argv[1];
    if (!strcmp(mode, "write") && argc == 4) {
        char dirs[4096];
        snprintf(dirs, sizeof dirs, "%s", argv[2]);
        for (char *slash = strchr(dirs, '/'); slash; slash = strchr(slash + 1, '/')) {
            *slash = 0;
            mkdir(dirs, 0755);
            *slash = '/';
        }
        FILE *f = fopen(argv[2], "w");
        if (!f || fputs(argv[3], f) < 0 || fclose(f)) {
            perror(argv[2]);
            return 1;
        }
        printf("wrote %s\n", argv[2]);
        return 0;
    }
    if (!strcmp(mode, "make") && argc == 4) {
        /* A file that must not be there yet, written and read back. */
        FILE *f = fopen(argv[2], "r");
        if (f) {
            fprintf(stderr, "%s is there already\n", argv[2]);
            return 1;
        }
        f = fopen(argv[2], "w");
        if (!f || fputs(argv[3], f) < 0 || fclose(f)) {
            perror(argv[2]);
            return 1;
        }
        return print_file(argv[2]);
    }
    if ((!strcmp(mode, "read") && argc == 3) || !strcmp(mode, "cat")) {
        for (int i = 2; i < argc; i++) {
            if (print_file(argv[i]))
                return 1;
        }
        return 0;
    }
    if (!strcmp(mode, "sleep") && argc == 3) {
        struct timespec t = {atoi(argv[2]), 0};
        nanosleep(&t, NULL);
        puts("slept");
        return 0;
    }
    if (!strcmp(mode, "spin")) {
        volatile unsigned long n = 0;
        for (;;)
            n++;
    }
    if (!strcmp(mode, "say") && argc == 4) {
        fprintf(stderr, "%s\n", argv[2]);
        return atoi(argv[3]);
    }
    if (!strcmp(mode, "flood") && argc == 4) {
        for (long n = atol(argv[2]); n > 0; n -= 64)
            fputs("flooding stderr so that nothing after it is kept ................\n", stderr);
        argv[2] = argv[3];
        mode = "alloc";
        argc = 3;
    }
    if (!strcmp(mode, "alloc") && argc == 3) {
        size_t mib = (size_t)atoi(argv[2]);
        for (size_t i = 0; i < mib; i++) {
            char *p = malloc(1 << 20);
            if (!p) {
                fprintf(stderr, "out of memory after %zu MiB\n", i);
                return 1;
            }
            /* Through a volatile pointer: the compiler may not drop the stores, and so
             * not the allocation either (an unused malloc is elided at -O2). */
            volatile char *touch = p;
            for (size_t at = 0; at < (1 << 20); at += 4096) {
                touch[at] = 1;
            }
        }
        puts("allocated");
        return 0;
    }
    if (!strcmp(mode, "exit") && argc == 3) {
        fprintf(stderr, "exiting %s\n", argv[2]);
        return atoi(argv[2]);
    }
    fprintf(stderr, "farm_action: bad arguments\n");
    return 2;
}
