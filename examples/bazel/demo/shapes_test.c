/* The shapes library's test (`bazel test //:shapes_test`): what the program prints
 * for "circle 2, square 3, triangle 4" comes from these areas and this parse. */
#include <stdio.h>
#include <string.h>

#include "shapes.h"

static int failed;

static void expect(long got, long want, const char *what) {
    printf("%s %s: %ld (want %ld)\n", got == want ? "ok" : "FAILED", what, got, want);
    failed += got != want;
}

int main(void) {
    struct shape s[4];
    size_t n = parse_shapes("circle 2, square 3, triangle 4", s, 4);
    expect((long)n, 3, "shapes parsed");
    expect(area(&s[0]), 12568, "circle 2");
    expect(area(&s[1]), 9000, "square 3");
    expect(area(&s[2]), 8000, "triangle 4");
    expect(strcmp(kind_name(s[2].kind), "triangle"), 0, "the third's name");
    expect((long)parse_shapes("hexagon 1", s, 4), 0, "an unknown shape");
    return failed ? 1 : 0;
}
