/* What the example WASI 0.3 HTTP components share, over the wit-bindgen C bindings of
 * world `guest` (wit-0.3/world.wit, `wasi:http/service@0.3.0`): answering a request
 * with a whole body, the async way.
 *
 * The handler export is lifted async with a callback. respond() makes the response
 * with a body stream and a trailers future, returns it to the host (task.return), and
 * writes the body as the host reads it: when a write blocks, it returns WAIT on a
 * waitable set, and the host calls exports_wasi_http_handler_handle_callback (defined
 * here) once the write has gone through. Then the trailers (none), then EXIT. The
 * buffer must stay put while a write is in flight, so respond() takes it over. */
#ifndef WASM9P_HTTP_RESPOND_P3_H
#define WASM9P_HTTP_RESPOND_P3_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest.h"

/* One request's state between the callbacks. */
struct task {
  uint8_t *body;
  size_t len, written;
  wasi_http_types_stream_u8_writer_t body_writer;
  wasi_http_types_future_result_option_own_trailers_error_code_writer_t trailers_writer;
  bool trailers_written;
  guest_waitable_set_t set;
};

static void set_header(wasi_http_types_own_fields_t headers, const char *name, const char *value) {
  wasi_http_types_field_name_t n = {(uint8_t *)name, strlen(name)};
  wasi_http_types_field_value_t v = {(uint8_t *)value, strlen(value)};
  wasi_http_types_header_error_t err;
  wasi_http_types_method_fields_append(wasi_http_types_borrow_fields(headers), &n, &v, &err);
}

/* Writes what is left of the body, then the trailers; WAIT while a write is in
 * flight, EXIT once both are written (the task is freed then). */
static guest_callback_code_t step(struct task *t) {
  while (t->body_writer && t->written < t->len) {
    guest_waitable_status_t s =
        wasi_http_types_stream_u8_write(t->body_writer, t->body + t->written, t->len - t->written);
    if (s == GUEST_WAITABLE_STATUS_BLOCKED) {
      guest_waitable_join(t->body_writer, t->set);
      return GUEST_CALLBACK_CODE_WAIT(t->set);
    }
    t->written += GUEST_WAITABLE_COUNT(s);
    if (GUEST_WAITABLE_STATE(s) == GUEST_WAITABLE_DROPPED) break; /* the reader is gone */
  }
  if (t->body_writer) {
    /* The end of the body. */
    wasi_http_types_stream_u8_drop_writable(t->body_writer);
    t->body_writer = 0;
  }
  if (!t->trailers_written) {
    wasi_http_types_result_option_own_trailers_error_code_t none = {.is_err = false};
    none.val.ok.is_some = false;
    t->trailers_written = true;
    guest_waitable_status_t s =
        wasi_http_types_future_result_option_own_trailers_error_code_write(t->trailers_writer, &none);
    if (s == GUEST_WAITABLE_STATUS_BLOCKED) {
      guest_waitable_join(t->trailers_writer, t->set);
      return GUEST_CALLBACK_CODE_WAIT(t->set);
    }
  }
  wasi_http_types_future_result_option_own_trailers_error_code_drop_writable(t->trailers_writer);
  guest_waitable_set_drop(t->set);
  free(t->body);
  free(t);
  guest_context_set_0(NULL);
  return GUEST_CALLBACK_CODE_EXIT;
}

/* Returns the response (`status`, `type`, the `len` bytes of `body`, a malloc'd
 * buffer the task now owns) to the host; its body is still to write (step()). */
static struct task *return_response(uint16_t status, const char *type, uint8_t *body, size_t len) {
  struct task *t = calloc(1, sizeof *t);
  t->body = body;
  t->len = len;
  wasi_http_types_own_fields_t headers = wasi_http_types_constructor_fields();
  char length[24];
  snprintf(length, sizeof length, "%zu", len);
  set_header(headers, "content-type", type);
  set_header(headers, "content-length", length);
  wasi_http_types_stream_u8_t contents = wasi_http_types_stream_u8_new(&t->body_writer);
  wasi_http_types_future_result_option_own_trailers_error_code_t trailers =
      wasi_http_types_future_result_option_own_trailers_error_code_new(&t->trailers_writer);
  wasi_http_types_tuple2_own_response_future_result_void_error_code_t made;
  wasi_http_types_static_response_new(headers, &contents, trailers, &made);
  /* How the host's sending of the response ends: not needed here. */
  wasi_http_types_future_result_void_error_code_drop_readable(made.f1);
  wasi_http_types_method_response_set_status_code(wasi_http_types_borrow_response(made.f0), status);

  exports_wasi_http_handler_result_own_response_error_code_t ret = {.is_err = false};
  ret.val.ok = made.f0;
  exports_wasi_http_handler_handle_return(ret);

  t->set = guest_waitable_set_new();
  guest_context_set_0(t);
  return t;
}

/* Returns the response (see return_response()) and writes its body. The handler
 * returns what this returns. */
static guest_callback_code_t respond(uint16_t status, const char *type, uint8_t *body, size_t len) {
  return step(return_response(status, type, body, len));
}

/* respond() with a copy of `text`, as text/plain. */
static guest_callback_code_t respond_text(uint16_t status, const char *text) {
  return respond(status, "text/plain; charset=utf-8", (uint8_t *)strdup(text), strlen(text));
}

/* The request's path with its query, NUL-terminated and malloc'd (NULL if it has
 * none); the request is dropped. */
static char *take_target(exports_wasi_http_handler_own_request_t request) {
  guest_string_t target;
  char *out = NULL;
  if (wasi_http_types_method_request_get_path_with_query(wasi_http_types_borrow_request(request), &target)) {
    out = malloc(target.len + 1);
    memcpy(out, target.ptr, target.len);
    out[target.len] = '\0';
    guest_string_free(&target);
  }
  wasi_http_types_request_drop_own(request);
  return out;
}

guest_callback_code_t exports_wasi_http_handler_handle_callback(guest_event_t *event) {
  struct task *t = guest_context_get_0();
  /* What completed leaves the set; step() joins what it waits on next. */
  guest_waitable_join(event->waitable, 0);
  if (event->event == GUEST_EVENT_STREAM_WRITE) {
    t->written += GUEST_WAITABLE_COUNT(event->code);
    if (GUEST_WAITABLE_STATE(event->code) == GUEST_WAITABLE_DROPPED) t->written = t->len;
  }
  return step(t);
}

#endif
