#include <stdlib.h>
#include <string.h>
#include "shapes.h"

/* "circle 2, square 3" -> shapes; sizes in whole units. */
size_t parse_shapes(const char *text, struct shape *out, size_t most) {
    size_t n = 0;
    while (*text && n < most) {
        while (*text == ' ' || *text == ',') text++;
        enum kind k;
        if (strncmp(text, "circle", 6) == 0) k = CIRCLE, text += 6;
        else if (strncmp(text, "square", 6) == 0) k = SQUARE, text += 6;
        else if (strncmp(text, "triangle", 8) == 0) k = TRIANGLE, text += 8;
        else break;
        char *end;
        long size = strtol(text, &end, 10);
        if (end == text) break;
        out[n].kind = k;
        out[n].size = size * 1000;
        n++;
        text = end;
    }
    return n;
}
