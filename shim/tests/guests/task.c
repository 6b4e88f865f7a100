/* A containerd task's guest for the shim's tests: runs the steps its arguments name,
 * separated by `--`, and says what each did on stdout:
 *   cat FILE          print the file
 *   write FILE TEXT   create or replace FILE with TEXT (a failure: its errno's words,
 *                     and the task ends with 1)
 *   ls DIR            the names in DIR, sorted, one line
 *   env NAME          the variable's value
 *   cwd               the working directory
 *   alloc MIB         allocate and touch MIB MiB
 *   sleep SECONDS     sleep
 *   exit CODE         end with CODE
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int compare(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int step(int argc, char **argv) {
  const char *cmd = argv[0];
  if (strcmp(cmd, "cat") == 0 && argc == 2) {
    FILE *f = fopen(argv[1], "r");
    if (!f) {
      printf("cat %s: %s\n", argv[1], strerror(errno));
      return 1;
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
    fclose(f);
    return 0;
  }
  if (strcmp(cmd, "write") == 0 && argc == 3) {
    FILE *f = fopen(argv[1], "w");
    if (!f || fputs(argv[2], f) < 0 || fclose(f) != 0) {
      printf("write %s: %s\n", argv[1], strerror(errno));
      return 1;
    }
    printf("wrote %s\n", argv[1]);
    return 0;
  }
  if (strcmp(cmd, "ls") == 0 && argc == 2) {
    DIR *d = opendir(argv[1]);
    if (!d) {
      printf("ls %s: %s\n", argv[1], strerror(errno));
      return 1;
    }
    char *names[256];
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) && count < 256) {
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[count++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, count, sizeof *names, compare);
    printf("ls %s:", argv[1]);
    for (int i = 0; i < count; i++) printf(" %s", names[i]);
    printf("\n");
    return 0;
  }
  if (strcmp(cmd, "env") == 0 && argc == 2) {
    const char *v = getenv(argv[1]);
    printf("%s=%s\n", argv[1], v ? v : "(unset)");
    return 0;
  }
  if (strcmp(cmd, "cwd") == 0 && argc == 1) {
    char buf[4096];
    printf("cwd %s\n", getcwd(buf, sizeof buf) ? buf : strerror(errno));
    return 0;
  }
  if (strcmp(cmd, "alloc") == 0 && argc == 2) {
    size_t bytes = (size_t)atoi(argv[1]) << 20;
    char *p = malloc(bytes);
    if (!p) {
      printf("alloc %s MiB: refused\n", argv[1]);
      return 1;
    }
    memset(p, 1, bytes);
    /* Read back, so that the compiler cannot drop the allocation. */
    volatile unsigned sum = 0;
    for (size_t i = 0; i < bytes; i += 4096) sum += (unsigned char)p[i];
    printf("allocated %s MiB (%u pages)\n", argv[1], sum);
    return 0;
  }
  if (strcmp(cmd, "sleep") == 0 && argc == 2) {
    printf("sleeping\n");
    fflush(stdout);
    sleep((unsigned)atoi(argv[1]));
    return 0;
  }
  if (strcmp(cmd, "exit") == 0 && argc == 2) {
    fflush(stdout);
    exit(atoi(argv[1]));
  }
  printf("unknown step %s\n", cmd);
  return 2;
}

int main(int argc, char **argv) {
  int start = 1;
  for (int i = 1; i <= argc; i++) {
    if (i == argc || strcmp(argv[i], "--") == 0) {
      if (i > start) {
        int rc = step(i - start, argv + start);
        if (rc != 0) return rc;
      }
      start = i + 1;
    }
  }
  return 0;
}
