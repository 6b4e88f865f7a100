#define CONFIG 1
