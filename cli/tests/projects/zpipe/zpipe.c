/* zpipe IN OUT.zst OUT: compresses IN into OUT.zst with zstd, decompresses that
 * into OUT, and says how big each was. Exit 1 on any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <zstd.h>

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    *len = n;
    return buf;
}

static int spill(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t put = fwrite(data, 1, len, f);
    return fclose(f) == 0 && put == len ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: zpipe IN OUT.zst OUT\n");
        return 1;
    }
    size_t len;
    unsigned char *in = slurp(argv[1], &len);
    if (!in) { perror(argv[1]); return 1; }
    size_t bound = ZSTD_compressBound(len);
    void *packed = malloc(bound);
    size_t plen = ZSTD_compress(packed, bound, in, len, 19);
    if (ZSTD_isError(plen)) { fprintf(stderr, "compress: %s\n", ZSTD_getErrorName(plen)); return 1; }
    if (spill(argv[2], packed, plen)) { perror(argv[2]); return 1; }
    unsigned long long size = ZSTD_getFrameContentSize(packed, plen);
    if (size != len) { fprintf(stderr, "frame says %llu bytes, not %zu\n", size, len); return 1; }
    void *out = malloc(len ? len : 1);
    size_t olen = ZSTD_decompress(out, len, packed, plen);
    if (ZSTD_isError(olen)) { fprintf(stderr, "decompress: %s\n", ZSTD_getErrorName(olen)); return 1; }
    if (spill(argv[3], out, olen)) { perror(argv[3]); return 1; }
    printf("%zu bytes -> %zu compressed -> %zu\n", len, plen, olen);
    return 0;
}
