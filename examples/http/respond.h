/* What the example HTTP components share: making a response, writing its body and
 * finishing it, over the wit-bindgen C bindings of world `guest` (wit/world.wit,
 * `wasi:http/proxy`). Each function is small on purpose: this is the part of a
 * component a reader copies. */
#ifndef WASM9P_HTTP_RESPOND_H
#define WASM9P_HTTP_RESPOND_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "guest.h"

typedef wasi_http_types_own_response_outparam_t outparam_t;
typedef wasi_http_types_own_incoming_request_t request_t;

/* One response header. */
typedef struct {
  const char *name;
  const char *value;
} header_t;

/* A response whose head is sent: its body and the stream that writes it. */
typedef struct {
  wasi_http_types_own_outgoing_body_t body;
  wasi_io_streams_own_output_stream_t stream;
} body_t;

static wasi_http_types_own_fields_t make_fields(const header_t *headers, size_t n) {
  wasi_http_types_own_fields_t fields = wasi_http_types_constructor_fields();
  for (size_t i = 0; i < n; i++) {
    wasi_http_types_field_name_t name = {(uint8_t *)headers[i].name, strlen(headers[i].name)};
    wasi_http_types_field_value_t value = {(uint8_t *)headers[i].value, strlen(headers[i].value)};
    wasi_http_types_header_error_t err;
    wasi_http_types_method_fields_append(wasi_http_types_borrow_fields(fields), &name, &value, &err);
  }
  return fields;
}

/* Sends the head (`status`, `headers`) and returns the body to write. */
static body_t start_response(outparam_t out, uint16_t status, const header_t *headers, size_t n) {
  wasi_http_types_own_outgoing_response_t response =
      wasi_http_types_constructor_outgoing_response(make_fields(headers, n));
  wasi_http_types_borrow_outgoing_response_t borrowed = wasi_http_types_borrow_outgoing_response(response);
  wasi_http_types_method_outgoing_response_set_status_code(borrowed, status);
  body_t body;
  wasi_http_types_method_outgoing_response_body(borrowed, &body.body);
  wasi_http_types_method_outgoing_body_write(wasi_http_types_borrow_outgoing_body(body.body), &body.stream);
  wasi_http_types_result_own_outgoing_response_error_code_t result = {.is_err = false, .val = {.ok = response}};
  wasi_http_types_static_response_outparam_set(out, &result);
  return body;
}

/* Writes `len` bytes of the body; false if the client went away. */
static bool write_body(body_t *body, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    /* A blocking write takes at most 4096 bytes. */
    size_t n = len < 4096 ? len : 4096;
    guest_list_u8_t chunk = {(uint8_t *)p, n};
    wasi_io_streams_stream_error_t err;
    if (!wasi_io_streams_method_output_stream_blocking_write_and_flush(
            wasi_io_streams_borrow_output_stream(body->stream), &chunk, &err)) {
      return false;
    }
    p += n;
    len -= n;
  }
  return true;
}

/* Moves up to `len` bytes from `from` (a file's input-stream, say) into the body, host
 * to host: the bytes never enter this component's memory. Returns how many moved;
 * fewer than `len` if the input ended first or the client went away. */
static inline uint64_t splice_body(body_t *body, wasi_io_streams_borrow_input_stream_t from, uint64_t len) {
  uint64_t moved = 0;
  while (moved < len) {
    uint64_t n;
    wasi_io_streams_stream_error_t err;
    if (!wasi_io_streams_method_output_stream_blocking_splice(
            wasi_io_streams_borrow_output_stream(body->stream), from, len - moved, &n, &err)) {
      if (err.tag == WASI_IO_STREAMS_STREAM_ERROR_LAST_OPERATION_FAILED) {
        wasi_io_error_error_drop_own(err.val.last_operation_failed);
      }
      break;
    }
    moved += n;
  }
  return moved;
}

/* Opens the file at the absolute namespace path `path` through wasi:filesystem (the
 * preopen holding it: the longest whose path is a prefix of it; the preopens are
 * asked for once) and gives its input-stream from the start, to splice into a body.
 * Drop the stream, then the file, when done. False if it cannot be opened. */
static inline bool open_read_stream(const char *path, wasi_filesystem_types_own_descriptor_t *file,
                                    wasi_io_streams_own_input_stream_t *stream) {
  static wasi_filesystem_preopens_list_tuple2_own_descriptor_string_t preopens;
  static bool asked;
  if (!asked) {
    wasi_filesystem_preopens_get_directories(&preopens);
    asked = true;
  }
  size_t best = 0;
  bool found = false;
  wasi_filesystem_types_borrow_descriptor_t dir;
  for (size_t i = 0; i < preopens.len; i++) {
    const char *name = (const char *)preopens.ptr[i].f1.ptr;
    size_t len = preopens.ptr[i].f1.len;
    while (len > 0 && name[len - 1] == '/') len--;
    bool holds = strncmp(path, name, len) == 0 && (path[len] == '/' || path[len] == '\0');
    if (holds && (!found || len > best)) {
      best = len;
      found = true;
      dir = wasi_filesystem_types_borrow_descriptor(preopens.ptr[i].f0);
    }
  }
  if (!found) return false;
  const char *rest = path + best;
  while (*rest == '/') rest++;
  if (*rest == '\0') rest = ".";
  guest_string_t name = {(uint8_t *)rest, strlen(rest)};
  wasi_filesystem_types_error_code_t err;
  if (!wasi_filesystem_types_method_descriptor_open_at(dir, WASI_FILESYSTEM_TYPES_PATH_FLAGS_SYMLINK_FOLLOW,
                                                        &name, 0, WASI_FILESYSTEM_TYPES_DESCRIPTOR_FLAGS_READ,
                                                        file, &err)) {
    return false;
  }
  if (!wasi_filesystem_types_method_descriptor_read_via_stream(wasi_filesystem_types_borrow_descriptor(*file), 0,
                                                                stream, &err)) {
    wasi_filesystem_types_descriptor_drop_own(*file);
    return false;
  }
  return true;
}

/* Ends the body (and the response). */
static void finish_body(body_t *body) {
  wasi_io_streams_output_stream_drop_own(body->stream);
  wasi_http_types_error_code_t err;
  wasi_http_types_static_outgoing_body_finish(body->body, NULL, &err);
}

/* A whole response of `text` (a NUL-terminated string). */
static void respond_text(outparam_t out, uint16_t status, const char *text) {
  const header_t headers[] = {{"content-type", "text/plain; charset=utf-8"}};
  body_t body = start_response(out, status, headers, 1);
  write_body(&body, text, strlen(text));
  finish_body(&body);
}

#endif
