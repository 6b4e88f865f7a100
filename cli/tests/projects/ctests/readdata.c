#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: readdata PATH\n");
        return 2;
    }
    char line[128] = {0};
    FILE *f = fopen(argv[1], "r");
    if (!f || !fgets(line, sizeof line, f)) {
        perror(argv[1]);
        return 1;
    }
    fclose(f);
    if (strcmp(line, "data from the source tree\n") != 0) {
        fprintf(stderr, "%s holds %s\n", argv[1], line);
        return 1;
    }
    printf("readdata: %s ok\n", argv[1]);
    return 0;
}
