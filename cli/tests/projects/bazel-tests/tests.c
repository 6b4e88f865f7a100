/* The tests of cli/tests/projects/bazel-tests, one mode per test (its args):
 *   pass   reads its runfile data.txt (from the runfiles, where the test starts),
 *          writes and reads back a file in $TEST_TMPDIR, checks $TEST_TARGET, leaves
 *          report.txt, sub/more.txt and blob.bin in $TEST_UNDECLARED_OUTPUTS_DIR and
 *          a.part and b.part in $TEST_UNDECLARED_OUTPUTS_ANNOTATIONS_DIR: exit 0
 *   fail   prints what it expected and what it got: exit 1
 *   shard  says which shard of how many it is ($TEST_SHARD_INDEX of
 *          $TEST_TOTAL_SHARDS), touching $TEST_SHARD_STATUS_FILE as sharding asks
 *   sleep  sleeps for a minute (for a short --test_timeout)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int check(int ok, const char *what) {
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "pass")) {
        int failed = 0;
        char line[64] = "";
        FILE *f = fopen("data.txt", "r");
        failed += check(f && fgets(line, sizeof line, f) && !strcmp(line, "a line of data\n"),
                        "data.txt from the runfiles");
        const char *tmp = getenv("TEST_TMPDIR");
        char path[4096];
        snprintf(path, sizeof path, "%s/scratch", tmp ? tmp : "/nonexistent");
        FILE *w = fopen(path, "w");
        failed += check(w && fputs("scratch", w) >= 0 && !fclose(w), "a file written in TEST_TMPDIR");
        FILE *r = fopen(path, "r");
        failed += check(r && fgets(line, sizeof line, r) && !strcmp(line, "scratch"),
                        "and read back");
        const char *undeclared = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
        if (undeclared) {
            snprintf(path, sizeof path, "%s/report.txt", undeclared);
            FILE *o = fopen(path, "w");
            failed += check(o && fputs("the passes test's report\n", o) >= 0 && !fclose(o),
                            "an undeclared output");
            snprintf(path, sizeof path, "%s/sub", undeclared);
            mkdir(path, 0755);
            snprintf(path, sizeof path, "%s/sub/more.txt", undeclared);
            o = fopen(path, "w");
            failed += check(o && fputs("more\n", o) >= 0 && !fclose(o), "and one in a directory");
            snprintf(path, sizeof path, "%s/blob.bin", undeclared);
            o = fopen(path, "wb");
            failed += check(o && fwrite("\0\1\2\3", 1, 4, o) == 4 && !fclose(o), "and a binary one");
        }
        const char *annotations = getenv("TEST_UNDECLARED_OUTPUTS_ANNOTATIONS_DIR");
        if (annotations) {
            /* Written in the other order: the annotations go by the parts' names. */
            const char *parts[][2] = {{"b.part", "the second part\n"}, {"a.part", "the first part\n"}};
            for (int i = 0; i < 2; i++) {
                snprintf(path, sizeof path, "%s/%s", annotations, parts[i][0]);
                FILE *o = fopen(path, "w");
                failed += check(o && fputs(parts[i][1], o) >= 0 && !fclose(o), "an annotation");
            }
        }
        const char *target = getenv("TEST_TARGET");
        failed += check(target && !strcmp(target, "//:passes"), "TEST_TARGET");
        printf("%d checks failed\n", failed);
        return failed ? 1 : 0;
    }
    if (!strcmp(mode, "fail")) {
        printf("expected 4, got %d\n", 2 + 3);
        return 1;
    }
    if (!strcmp(mode, "shard")) {
        const char *status = getenv("TEST_SHARD_STATUS_FILE");
        if (status) {
            FILE *s = fopen(status, "w");
            if (s)
                fclose(s);
        }
        const char *index = getenv("TEST_SHARD_INDEX");
        const char *total = getenv("TEST_TOTAL_SHARDS");
        printf("shard %s of %s\n", index ? index : "?", total ? total : "?");
        return index && total ? 0 : 1;
    }
    if (!strcmp(mode, "sleep")) {
        struct timespec t = {60, 0};
        nanosleep(&t, NULL);
        puts("woke up");
        return 0;
    }
    fprintf(stderr, "tests: unknown mode %s\n", mode);
    return 2;
}
