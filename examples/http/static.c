/* Serves the files of the namespace's `/` over HTTP: mount what to serve there.
 *
 *   scripts/build-http examples/http/static.c static.wasm
 *   wasm9p http static.wasm --listen tcp:127.0.0.1:8080 --mount type=9p,export=site,target=/,cache=loose
 *
 * GET and HEAD only (405 otherwise). The path is percent-decoded; a `..` segment
 * (encoded or not) is refused with 400 before anything is looked up, and the namespace
 * has nothing above its `/` anyway. A missing file is 404 (a second miss is answered
 * by the mount's negative cache). A directory is served by its `index.html` (a path
 * to one without its trailing slash is redirected to it first, so that its relative
 * links work). Each file gets an ETag made of its size and modification time; a
 * request whose If-None-Match names it gets 304 and no body. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "respond.h"

/* The longest path served. */
#define MAX_PATH 4096

static int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The request's path without its query, percent-decoded into `out`; false if it is
 * malformed, too long, holds a NUL or has a `..` segment. */
static bool decode_path(const uint8_t *p, size_t len, char *out) {
  size_t n = 0;
  for (size_t i = 0; i < len && p[i] != '?' && p[i] != '#'; i++) {
    char c = (char)p[i];
    if (c == '%') {
      if (i + 2 >= len) return false;
      int hi = hex((char)p[i + 1]), lo = hex((char)p[i + 2]);
      if (hi < 0 || lo < 0) return false;
      c = (char)(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0' || n + 1 >= MAX_PATH) return false;
    out[n++] = c;
  }
  out[n] = '\0';
  if (n == 0 || out[0] != '/') return false;
  /* No segment may be `..`. */
  for (const char *s = out; *s; ) {
    while (*s == '/') s++;
    const char *end = s;
    while (*end && *end != '/') end++;
    if (end - s == 2 && s[0] == '.' && s[1] == '.') return false;
    s = end;
  }
  return true;
}

static const char *content_type(const char *path) {
  static const struct { const char *ext, *type; } types[] = {
      {".html", "text/html; charset=utf-8"}, {".htm", "text/html; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},   {".js", "text/javascript; charset=utf-8"},
      {".json", "application/json"},         {".txt", "text/plain; charset=utf-8"},
      {".svg", "image/svg+xml"},             {".png", "image/png"},
      {".jpg", "image/jpeg"},                {".wasm", "application/wasm"},
  };
  const char *dot = strrchr(path, '.');
  if (dot && !strchr(dot, '/')) {
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
      if (strcmp(dot, types[i].ext) == 0) return types[i].type;
    }
  }
  return "application/octet-stream";
}

/* Whether one of the request's If-None-Match values names `etag` (or is `*`). */
static bool none_match(request_t request, const char *etag) {
  wasi_http_types_own_headers_t headers =
      wasi_http_types_method_incoming_request_headers(wasi_http_types_borrow_incoming_request(request));
  wasi_http_types_field_name_t name = {(uint8_t *)"if-none-match", 13};
  wasi_http_types_list_field_value_t values;
  wasi_http_types_method_fields_get(wasi_http_types_borrow_fields(headers), &name, &values);
  bool matched = false;
  size_t etag_len = strlen(etag);
  for (size_t i = 0; i < values.len && !matched; i++) {
    /* A list: "a", "b" */
    const uint8_t *v = values.ptr[i].ptr;
    size_t len = values.ptr[i].len, at = 0;
    while (at < len && !matched) {
      while (at < len && (v[at] == ' ' || v[at] == ',')) at++;
      size_t start = at;
      while (at < len && v[at] != ',') at++;
      size_t end = at;
      while (end > start && v[end - 1] == ' ') end--;
      if ((end - start == 1 && v[start] == '*') ||
          (end - start == etag_len && memcmp(v + start, etag, etag_len) == 0)) {
        matched = true;
      }
    }
  }
  wasi_http_types_list_field_value_free(&values);
  wasi_http_types_fields_drop_own(headers);
  return matched;
}

/* Sends `len` bytes of the file at `path` as the body, by splice from its
 * input-stream; false if it cannot be opened or ends short. */
static bool splice_file(body_t *body, const char *path, uint64_t len) {
  wasi_filesystem_types_own_descriptor_t file;
  wasi_io_streams_own_input_stream_t stream;
  if (!open_read_stream(path, &file, &stream)) return false;
  bool whole = splice_body(body, wasi_io_streams_borrow_input_stream(stream), len) == len;
  wasi_io_streams_input_stream_drop_own(stream);
  wasi_filesystem_types_descriptor_drop_own(file);
  return whole;
}

/* Serves the file at `path`; `known` is its metadata when the caller has it already. */
static void serve_file(request_t request, outparam_t out, const char *path, const struct stat *known, bool head) {
  struct stat st;
  if (known) {
    st = *known;
  } else if (stat(path, &st) != 0) {
    bool missing = errno == ENOENT || errno == ENOTDIR;
    respond_text(out, missing ? 404 : 500, missing ? "not found\n" : "cannot read the file\n");
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    respond_text(out, 404, "not found\n");
    return;
  }
  char etag[64], length[32];
  snprintf(etag, sizeof etag, "\"%llx-%llx\"", (unsigned long long)st.st_size,
           (unsigned long long)st.st_mtim.tv_sec * 1000000000ull + (unsigned long long)st.st_mtim.tv_nsec);
  snprintf(length, sizeof length, "%llu", (unsigned long long)st.st_size);
  if (none_match(request, etag)) {
    const header_t headers[] = {{"etag", etag}};
    body_t body = start_response(out, 304, headers, 1);
    finish_body(&body);
    return;
  }
  const header_t headers[] = {
      {"content-type", content_type(path)}, {"content-length", length}, {"etag", etag}};
  body_t body = start_response(out, 200, headers, 3);
  if (!head && !splice_file(&body, path, (uint64_t)st.st_size)) {
    /* The head is sent: a body cut short is all that is left to say. The host sees
     * fewer bytes than the declared length and ends the connection. */
    wasi_io_streams_output_stream_drop_own(body.stream);
    wasi_http_types_outgoing_body_drop_own(body.body);
    return;
  }
  finish_body(&body);
}

void exports_wasi_http_incoming_handler_handle(request_t request, outparam_t out) {
  wasi_http_types_borrow_incoming_request_t borrowed = wasi_http_types_borrow_incoming_request(request);
  wasi_http_types_method_t method;
  wasi_http_types_method_incoming_request_method(borrowed, &method);
  bool head = method.tag == WASI_HTTP_TYPES_METHOD_HEAD;
  if (method.tag != WASI_HTTP_TYPES_METHOD_GET && !head) {
    wasi_http_types_method_free(&method);
    wasi_http_types_incoming_request_drop_own(request);
    respond_text(out, 405, "only GET and HEAD\n");
    return;
  }
  guest_string_t target = {0};
  static char path[MAX_PATH + sizeof "/index.html"];
  /* The path as the client sent it (before its query), for a redirect. */
  static char raw[MAX_PATH + 2];
  bool ok = wasi_http_types_method_incoming_request_path_with_query(borrowed, &target) &&
            decode_path(target.ptr, target.len, path);
  if (ok) {
    size_t n = 0;
    while (n < target.len && n < MAX_PATH && target.ptr[n] != '?' && target.ptr[n] != '#') n++;
    memcpy(raw, target.ptr, n);
    raw[n] = '\0';
  }
  if (target.ptr) guest_string_free(&target);
  if (!ok) {
    wasi_http_types_incoming_request_drop_own(request);
    respond_text(out, 400, "bad path\n");
    return;
  }
  struct stat st;
  bool found = stat(path, &st) == 0;
  if (found && S_ISDIR(st.st_mode)) {
    size_t len = strlen(path);
    if (path[len - 1] != '/') {
      char location[MAX_PATH + 2];
      snprintf(location, sizeof location, "%s/", raw);
      const header_t headers[] = {{"location", location}};
      body_t body = start_response(out, 301, headers, 1);
      finish_body(&body);
      wasi_http_types_incoming_request_drop_own(request);
      return;
    }
    strcat(path, "index.html");
    serve_file(request, out, path, NULL, head);
  } else {
    /* A failed stat is looked at again there, for its error. */
    serve_file(request, out, path, found ? &st : NULL, head);
  }
  wasi_http_types_incoming_request_drop_own(request);
}
