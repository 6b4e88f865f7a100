/* Shapes and their areas, in thousandths of a square unit. */
#ifndef SHAPES_H
#define SHAPES_H
#include <stddef.h>

enum kind { CIRCLE, SQUARE, TRIANGLE };

struct shape {
    enum kind kind;
    long size; /* radius, side or base (= height), in thousandths */
};

long area(const struct shape *s);
const char *kind_name(enum kind k);
size_t parse_shapes(const char *text, struct shape *out, size_t most);
#endif
