// A miniature of what a C compiler does with a source file: for every #include line,
// probe each include directory in turn until the header is found (most probes miss),
// then write a small object file in many tiny writes. Run it twice on a loose 9p mount
// and the second pass is answered by the caches.
#include <stdio.h>
#include <string.h>

static const char *dirs[] = {"/src/include/missing1", "/src/include/missing2", "/src/include"};

static int preprocess(const char *source, int pass) {
    FILE *f = fopen(source, "r");
    if (!f) { perror(source); return 1; }
    char line[512], path[1024];
    int found = 0, probes = 0;
    while (fgets(line, sizeof line, f)) {
        char name[256];
        if (sscanf(line, "#include \"%255[^\"]\"", name) != 1) continue;
        for (unsigned i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", dirs[i], name);
            probes++;
            FILE *h = fopen(path, "r");
            if (h) { fclose(h); found++; if (pass == 1) printf("found %s\n", path); break; }
        }
    }
    fclose(f);
    printf("pass %d: %d headers found in %d probes\n", pass, found, probes);
    return 0;
}

int main(int argc, char **argv) {
    const char *source = argc > 1 ? argv[1] : "/src/src/main.c";
    for (int pass = 1; pass <= 2; pass++)
        if (preprocess(source, pass)) return 1;
    FILE *o = fopen("/src/main.o", "w");
    if (!o) { perror("/src/main.o"); return 1; }
    for (int i = 0; i < 4096; i++) { fputc(i & 0xff, o); fflush(o); }
    if (fclose(o)) { perror("close"); return 1; }
    printf("wrote /src/main.o\n");
    return 0;
}
