/* The smallest wasi:http component: every request gets the same answer.
 *
 *   scripts/build-http examples/http/hello.c hello.wasm
 *   wasm9p http hello.wasm --listen tcp:127.0.0.1:8080 --no-mounts
 *   curl http://127.0.0.1:8080/   # Hello from wasm9p */
#include "respond.h"

void exports_wasi_http_incoming_handler_handle(request_t request, outparam_t out) {
  wasi_http_types_incoming_request_drop_own(request);
  respond_text(out, 200, "Hello from wasm9p\n");
}
