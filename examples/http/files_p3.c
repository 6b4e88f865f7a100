/* A WASI 0.3 HTTP component (`wasi:http/handler@0.3.0`, world `guest` of
 * examples/http/wit-0.3): `/` answers a fixed line, any other path the bytes of that
 * file in the namespace (404 if there is none, 400 for a `..` segment).
 *
 *   scripts/build-http --p3 examples/http/files_p3.c files_p3.wasm
 *   wasm9p http files_p3.wasm --listen tcp:127.0.0.1:8080 --mount type=9p,export=site,target=/
 *
 * The file is read through wasi-libc and the preview1 adapter, that is through the
 * host's wasi:filesystem, before the response is made; respond_p3.h writes the body
 * the async way. */
#include "respond_p3.h"

/* The largest file served. */
#define MAX_BODY (16u << 20)

/* Reads all of `path` into a fresh buffer; false if it cannot be read whole. */
static bool read_file(const char *path, uint8_t **out, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  bool whole = false;
  for (;;) {
    if (n == cap) {
      if (cap >= MAX_BODY) break;
      cap *= 2;
      buf = realloc(buf, cap);
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      whole = !ferror(f);
      break;
    }
  }
  fclose(f);
  if (!whole) {
    free(buf);
    return false;
  }
  *out = buf;
  *len = n;
  return true;
}

/* Whether any segment of `path` is `..`. */
static bool climbs(const char *path) {
  for (const char *s = path; *s;) {
    while (*s == '/') s++;
    const char *end = s;
    while (*end && *end != '/') end++;
    if (end - s == 2 && s[0] == '.' && s[1] == '.') return true;
    s = end;
  }
  return false;
}

guest_callback_code_t exports_wasi_http_handler_handle(exports_wasi_http_handler_own_request_t request) {
  char *path = take_target(request);
  if (path) path[strcspn(path, "?#")] = '\0';
  uint8_t *body;
  size_t len;
  guest_callback_code_t code;
  if (!path || strcmp(path, "/") == 0) {
    code = respond_text(200, "hello from a WASI 0.3 component\n");
  } else if (climbs(path)) {
    code = respond_text(400, "a path may not climb out with ..\n");
  } else if (read_file(path, &body, &len)) {
    code = respond(200, "application/octet-stream", body, len);
  } else {
    code = respond_text(404, "no such file\n");
  }
  free(path);
  return code;
}
