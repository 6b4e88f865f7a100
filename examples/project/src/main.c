#include <stdio.h>
#include "config.h"
#include "shapes.h"

int main(int argc, char **argv) {
    struct shape shapes[MAX_SHAPES];
    const char *spec = argc > 1 ? argv[1] : "circle 2, square 3, triangle 4";
    size_t n = parse_shapes(spec, shapes, MAX_SHAPES);
    long total = 0;
    for (size_t i = 0; i < n; i++) {
        long a = area(&shapes[i]);
        printf("%-8s %3ld: %ld.%03ld\n", kind_name(shapes[i].kind), shapes[i].size / 1000,
               a / 1000, a % 1000);
        total += a;
    }
    printf("total %ld.%03ld\n", total / 1000, total % 1000);
    return n > 0 ? 0 : 1;
}
