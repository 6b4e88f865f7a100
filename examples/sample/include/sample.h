#define SAMPLE 1
