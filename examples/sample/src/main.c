#include "sample.h"
#include "config.h"
#include "util.h"
int main(void) { return SAMPLE - 1; }
