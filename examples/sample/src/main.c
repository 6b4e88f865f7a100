#include "sample.h"
int main(void) { return SAMPLE - 1; }
