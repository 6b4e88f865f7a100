/* A WASI 0.3 HTTP component that misbehaves on request, for cli/tests/http/p3.rs
 * (built with tests::c_http_p3):
 *   /ok      200 "ok"
 *   /loop    computes forever before it answers (the timeout)
 *   /grow    takes memory until it cannot (the memory limit)
 *   /trap    traps
 *   /stall   answers 200 with a body it never writes: the head goes out, and the
 *            instance is stopped at the deadline (the timeout of a streaming body)
 *   /count   how many requests this instance has served, this one included (the
 *            instance reuse of `--reuse`) */
#include "../../examples/http/respond_p3.h"

static volatile uint64_t sink;

/* Requests this instance has served. */
static uint64_t served;

guest_callback_code_t exports_wasi_http_handler_handle(exports_wasi_http_handler_own_request_t request) {
  served++;
  char *path = take_target(request);
  const char *p = path ? path : "/";
  if (strcmp(p, "/count") == 0) {
    free(path);
    char text[32];
    snprintf(text, sizeof text, "%llu\n", (unsigned long long)served);
    return respond_text(200, text);
  }
  if (strcmp(p, "/loop") == 0) {
    for (uint64_t i = 0;; i++) sink = i;
  }
  if (strcmp(p, "/grow") == 0) {
    for (;;) {
      volatile char *block = malloc(1 << 20);
      if (!block) __builtin_trap();
      block[0] = 1;
    }
  }
  if (strcmp(p, "/trap") == 0) __builtin_trap();
  if (strcmp(p, "/stall") == 0) {
    free(path);
    /* A body of 5 bytes said and none written: wait on a set nothing joins. */
    struct task *t = return_response(200, "text/plain", (uint8_t *)strdup("never"), 5);
    return GUEST_CALLBACK_CODE_WAIT(t->set);
  }
  free(path);
  return respond_text(200, "ok\n");
}
