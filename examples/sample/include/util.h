#define UTIL 1
