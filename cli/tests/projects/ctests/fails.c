#include <stdio.h>

int main(void) {
    fputs("failing on purpose\n", stderr);
    return 3;
}
