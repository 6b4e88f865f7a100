#ifndef CONFIG_H
#define CONFIG_H
#define MAX_SHAPES 16
#define PI_THOUSANDTHS 3142
#endif
