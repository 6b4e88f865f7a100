/* zstd's round trip as a test (`bazel test //:roundtrip_test`): buffers of several
 * kinds compressed at several levels decompress to themselves, the frame says its
 * size, and a frame with a checksum that is damaged is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zstd.h"

static int failed;

static void expect(int ok, const char *what, int level) {
    printf("%s: %s at level %d\n", ok ? "ok" : "FAILED", what, level);
    failed += !ok;
}

int main(void) {
    enum { N = 200000 };
    static char text[N], noise[N], zeros[N];
    unsigned x = 12345;
    for (int i = 0; i < N; i++) {
        text[i] = "the quick brown fox jumps over the lazy dog\n"[i % 44];
        x = x * 1103515245 + 12345;
        noise[i] = (char)(x >> 16);
    }
    const char *kinds[] = {"text", "noise", "zeros"};
    const char *inputs[] = {text, noise, zeros};
    size_t cap = ZSTD_compressBound(N);
    char *packed = malloc(cap), *back = malloc(N);
    for (int level = 1; level <= 9; level += 4) {
        for (int k = 0; k < 3; k++) {
            size_t n = ZSTD_compress(packed, cap, inputs[k], N, level);
            if (ZSTD_isError(n)) {
                expect(0, ZSTD_getErrorName(n), level);
                continue;
            }
            unsigned long long size = ZSTD_getFrameContentSize(packed, n);
            size_t m = ZSTD_decompress(back, N, packed, n);
            char what[64];
            snprintf(what, sizeof what, "%s (%zu bytes packed)", kinds[k], n);
            expect(size == N && m == N && !memcmp(back, inputs[k], N), what, level);
        }
    }
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    size_t n = ZSTD_compress2(cctx, packed, cap, text, N);
    packed[n - 2] ^= 0x55; /* in the checksum */
    expect(ZSTD_isError(ZSTD_decompress(back, N, packed, n)), "a damaged frame refused", 3);
    ZSTD_freeCCtx(cctx);
    printf("%d failed\n", failed);
    return failed ? 1 : 0;
}
