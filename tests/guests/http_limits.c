/* A wasi:http component that misbehaves on request, for the limit tests of
 * cli/tests/http.rs (built with tests::c_http):
 *   /ok            200 "ok"
 *   /loop          computes forever (the timeout)
 *   /grow          takes memory until it cannot (the memory limit)
 *   /trap          traps
 *   /sleep?MS      waits MS milliseconds on a clock, then 200 (the queue, SIGTERM)
 *   /echo          reads the request body, answers its length (the body bound)
 *   /fetch?HOST:PORT  sends GET http://HOST:PORT/ and answers "fetched STATUS", or 502
 *                  "denied" when the host refuses it (the outgoing allow list)
 *   /write?NAME    creates /NAME in the namespace: "written", or the error's name
 *   /count         how many requests this instance has served, this one included (the
 *                  instance reuse of `--reuse`)
 *   /overlong      says a body of 5 bytes and writes 10
 *   /open?NAME     opens /NAME and leaves it open
 *   /unfinished    sends a head and one byte of a body it neither finishes nor drops
 *   /splice-trap?NAME  declares /NAME's length, splices half of it into the body, traps
 *   /splice-stop?NAME  the same, but stops reading there and finishes the body short */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "../../examples/http/respond.h"

static bool starts(const guest_string_t *s, const char *prefix) {
  size_t n = strlen(prefix);
  return s->len >= n && memcmp(s->ptr, prefix, n) == 0;
}

/* What follows the '?' of the target, NUL-terminated, in `out`. */
static void query(const guest_string_t *s, char *out, size_t cap) {
  size_t i = 0, n = 0;
  while (i < s->len && s->ptr[i] != '?') i++;
  for (i++; i < s->len && n + 1 < cap; i++) out[n++] = (char)s->ptr[i];
  out[n] = '\0';
}

static volatile uint64_t sink;

/* Requests this instance has served. */
static uint64_t served;

static void spin(void) {
  for (uint64_t i = 0;; i++) sink = i;
}

static void grow(void) {
  for (;;) {
    char *p = malloc(1 << 20);
    if (!p) abort();
    memset(p, 1, 1 << 20);
    sink += (uint64_t)(uintptr_t)p;
  }
}

static void echo(request_t request, outparam_t out) {
  wasi_http_types_own_incoming_body_t body;
  wasi_http_types_method_incoming_request_consume(wasi_http_types_borrow_incoming_request(request), &body);
  wasi_io_streams_own_input_stream_t stream;
  wasi_http_types_method_incoming_body_stream(wasi_http_types_borrow_incoming_body(body), &stream);
  uint64_t total = 0;
  for (;;) {
    guest_list_u8_t chunk;
    wasi_io_streams_stream_error_t err;
    if (!wasi_io_streams_method_input_stream_blocking_read(wasi_io_streams_borrow_input_stream(stream), 65536, &chunk, &err)) {
      break;
    }
    total += chunk.len;
    guest_list_u8_free(&chunk);
  }
  wasi_io_streams_input_stream_drop_own(stream);
  wasi_http_types_incoming_body_drop_own(body);
  char text[64];
  snprintf(text, sizeof text, "%llu\n", (unsigned long long)total);
  respond_text(out, 200, text);
}

static void sleep_ms(uint64_t ms) {
  wasi_clocks_monotonic_clock_own_pollable_t p = wasi_clocks_monotonic_clock_subscribe_duration(ms * 1000000ull);
  wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(p));
  wasi_io_poll_pollable_drop_own(p);
}

static void fetch(const char *authority, outparam_t out) {
  wasi_http_types_own_outgoing_request_t req =
      wasi_http_types_constructor_outgoing_request(wasi_http_types_constructor_fields());
  wasi_http_types_borrow_outgoing_request_t b = wasi_http_types_borrow_outgoing_request(req);
  wasi_http_types_scheme_t scheme = {.tag = WASI_HTTP_TYPES_SCHEME_HTTP};
  wasi_http_types_method_outgoing_request_set_scheme(b, &scheme);
  guest_string_t auth = {(uint8_t *)authority, strlen(authority)};
  wasi_http_types_method_outgoing_request_set_authority(b, &auth);
  guest_string_t path = {(uint8_t *)"/", 1};
  wasi_http_types_method_outgoing_request_set_path_with_query(b, &path);
  wasi_http_types_own_future_incoming_response_t future;
  wasi_http_types_error_code_t err;
  if (!wasi_http_outgoing_handler_handle(req, NULL, &future, &err)) {
    respond_text(out, 502, err.tag == WASI_HTTP_TYPES_ERROR_CODE_HTTP_REQUEST_DENIED ? "denied\n" : "failed\n");
    return;
  }
  wasi_http_types_borrow_future_incoming_response_t fb = wasi_http_types_borrow_future_incoming_response(future);
  wasi_http_types_own_pollable_t ready = wasi_http_types_method_future_incoming_response_subscribe(fb);
  wasi_io_poll_method_pollable_block(wasi_io_poll_borrow_pollable(ready));
  wasi_io_poll_pollable_drop_own(ready);
  wasi_http_types_result_result_own_incoming_response_error_code_void_t got;
  char text[64] = "failed\n";
  uint16_t status = 502;
  if (wasi_http_types_method_future_incoming_response_get(fb, &got) && !got.is_err) {
    if (!got.val.ok.is_err) {
      snprintf(text, sizeof text, "fetched %u\n",
               wasi_http_types_method_incoming_response_status(
                   wasi_http_types_borrow_incoming_response(got.val.ok.val.ok)));
      status = 200;
      wasi_http_types_incoming_response_drop_own(got.val.ok.val.ok);
    } else if (got.val.ok.val.err.tag == WASI_HTTP_TYPES_ERROR_CODE_HTTP_REQUEST_DENIED) {
      strcpy(text, "denied\n");
    }
  }
  wasi_http_types_future_incoming_response_drop_own(future);
  respond_text(out, status, text);
}

static void write_file(const char *name, outparam_t out) {
  char path[300];
  snprintf(path, sizeof path, "/%s", name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    respond_text(out, 500, errno == EROFS ? "EROFS\n" : "failed\n");
    return;
  }
  bool ok = write(fd, "from a request\n", 15) == 15;
  close(fd);
  respond_text(out, ok ? 200 : 500, ok ? "written\n" : "failed\n");
}

/* A body that says 5 bytes and gets 10: the write past the length fails. */
static void overlong(outparam_t out) {
  const header_t headers[] = {{"content-length", "5"}};
  body_t body = start_response(out, 200, headers, 1);
  write_body(&body, "0123456789", 10);
  finish_body(&body);
}

static void leave_open(const char *name, outparam_t out) {
  char path[300];
  snprintf(path, sizeof path, "/%s", name);
  int fd = open(path, O_RDONLY);
  respond_text(out, fd < 0 ? 404 : 200, fd < 0 ? "no such file\n" : "left open\n");
}

/* The head and a byte, then the guest returns with its body and stream in hand. */
static void unfinished(outparam_t out) {
  body_t body = start_response(out, 200, NULL, 0);
  write_body(&body, "x", 1);
}

/* Half of /NAME spliced into a body that declares all of it; then a trap, or the
 * stream and file dropped and the body finished short. */
static void splice_half(const char *name, bool trap, outparam_t out) {
  char path[300], length[32];
  snprintf(path, sizeof path, "/%s", name);
  struct stat st;
  wasi_filesystem_types_own_descriptor_t file;
  wasi_io_streams_own_input_stream_t stream;
  if (stat(path, &st) != 0 || !open_read_stream(path, &file, &stream)) {
    respond_text(out, 404, "no such file\n");
    return;
  }
  snprintf(length, sizeof length, "%llu", (unsigned long long)st.st_size);
  const header_t headers[] = {{"content-length", length}};
  body_t body = start_response(out, 200, headers, 1);
  splice_body(&body, wasi_io_streams_borrow_input_stream(stream), (uint64_t)st.st_size / 2);
  if (trap) __builtin_trap();
  wasi_io_streams_input_stream_drop_own(stream);
  wasi_filesystem_types_descriptor_drop_own(file);
  finish_body(&body);
}

void exports_wasi_http_incoming_handler_handle(request_t request, outparam_t out) {
  served++;
  guest_string_t target = {0};
  wasi_http_types_method_incoming_request_path_with_query(wasi_http_types_borrow_incoming_request(request), &target);
  char q[256];
  query(&target, q, sizeof q);
  if (starts(&target, "/loop")) spin();
  if (starts(&target, "/grow")) grow();
  if (starts(&target, "/trap")) __builtin_trap();
  if (starts(&target, "/echo")) {
    echo(request, out);
  } else if (starts(&target, "/sleep")) {
    sleep_ms(strtoull(q, NULL, 10));
    respond_text(out, 200, "slept\n");
  } else if (starts(&target, "/write")) {
    write_file(q, out);
  } else if (starts(&target, "/fetch")) {
    fetch(q, out);
  } else if (starts(&target, "/count")) {
    char text[32];
    snprintf(text, sizeof text, "%llu\n", (unsigned long long)served);
    respond_text(out, 200, text);
  } else if (starts(&target, "/overlong")) {
    overlong(out);
  } else if (starts(&target, "/open")) {
    leave_open(q, out);
  } else if (starts(&target, "/unfinished")) {
    unfinished(out);
  } else if (starts(&target, "/splice-trap")) {
    splice_half(q, true, out);
  } else if (starts(&target, "/splice-stop")) {
    splice_half(q, false, out);
  } else {
    respond_text(out, 200, "ok\n");
  }
  guest_string_free(&target);
  wasi_http_types_incoming_request_drop_own(request);
}
