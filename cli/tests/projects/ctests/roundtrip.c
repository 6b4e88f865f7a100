#include <stdio.h>
#include <string.h>

int main(void) {
    const char *text = "written by a test\n";
    FILE *f = fopen("roundtrip.out", "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror("writing roundtrip.out");
        return 1;
    }
    char back[64] = {0};
    f = fopen("roundtrip.out", "r");
    if (!f || !fgets(back, sizeof back, f)) {
        perror("reading roundtrip.out back");
        return 1;
    }
    fclose(f);
    if (strcmp(back, text) != 0) {
        fprintf(stderr, "read back %s\n", back);
        return 1;
    }
    puts("roundtrip: ok");
    return 0;
}
