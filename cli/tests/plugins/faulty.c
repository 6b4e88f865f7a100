// A read-only plugin that misbehaves on purpose, for cli/tests/plugins.rs: reading
// /ok works, reading /trap traps (unreachable), reading /spin never returns (the host
// stops it when its fuel runs out), reading /sleep sleeps for an hour in a WASI call
// (where fuel does not tick; the host's call timeout stops it).
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_plugin.h"

typedef exports_wasm9p_fs_backend_error_t error_t;

static const char *names[] = {"ok", "trap", "spin", "sleep"};
#define ROOT 1
#define FILES 4

uint64_t exports_wasm9p_fs_backend_root(void) { return ROOT; }
bool exports_wasm9p_fs_backend_writable(void) { return false; }

bool exports_wasm9p_fs_backend_lookup_child(uint64_t dir, fs_plugin_string_t *name, uint64_t *ret, error_t *err) {
    bool found = false;
    for (int i = 0; dir == ROOT && i < FILES; i++) {
        if (name->len == strlen(names[i]) && memcmp(name->ptr, names[i], name->len) == 0) {
            *ret = (uint64_t)i + 2;
            found = true;
        }
    }
    fs_plugin_string_free(name);
    if (!found) *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND;
    return found;
}

bool exports_wasm9p_fs_backend_getattr(uint64_t node, exports_wasm9p_fs_backend_attr_t *ret, error_t *err) {
    if (node == ROOT) {
        *ret = (exports_wasm9p_fs_backend_attr_t){WASM9P_FS_TYPES_KIND_DIRECTORY, 0555, 0, 2, 0, 0};
        return true;
    }
    if (node < 2 || node >= 2 + FILES) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    *ret = (exports_wasm9p_fs_backend_attr_t){WASM9P_FS_TYPES_KIND_FILE, 0444, 5, 1, 0, 0};
    return true;
}

bool exports_wasm9p_fs_backend_readlink(uint64_t node, fs_plugin_string_t *ret, error_t *err) {
    (void)node; (void)ret;
    *err = WASM9P_FS_TYPES_ERROR_INVALID;
    return false;
}

bool exports_wasm9p_fs_backend_read(uint64_t node, uint64_t offset, uint32_t len, fs_plugin_list_u8_t *ret, error_t *err) {
    if (node == 3) __builtin_trap();
    if (node == 4) {
        volatile uint64_t spin = 0;
        for (;;) spin++;
    }
    if (node == 5) {
        struct timespec hour = {3600, 0};
        nanosleep(&hour, NULL);
    }
    if (node != 2) { *err = WASM9P_FS_TYPES_ERROR_IS_DIRECTORY; return false; }
    static const char text[] = "fine\n";
    size_t from = offset < 5 ? (size_t)offset : 5;
    size_t take = 5 - from < len ? 5 - from : len;
    ret->ptr = take ? malloc(take) : NULL;
    ret->len = take;
    if (take) memcpy(ret->ptr, text + from, take);
    return true;
}

bool exports_wasm9p_fs_backend_readdir(uint64_t dir, exports_wasm9p_fs_backend_list_dirent_t *ret, error_t *err) {
    if (dir != ROOT) { *err = WASM9P_FS_TYPES_ERROR_NOT_DIRECTORY; return false; }
    ret->ptr = malloc(FILES * sizeof *ret->ptr);
    ret->len = FILES;
    for (int i = 0; i < FILES; i++) {
        fs_plugin_string_dup(&ret->ptr[i].name, names[i]);
        ret->ptr[i].node = (uint64_t)i + 2;
        ret->ptr[i].kind = WASM9P_FS_TYPES_KIND_FILE;
    }
    return true;
}

bool exports_wasm9p_fs_backend_write(uint64_t node, uint64_t offset, fs_plugin_list_u8_t *data, uint32_t *ret, error_t *err) {
    (void)node; (void)offset; (void)ret;
    fs_plugin_list_u8_free(data);
    *err = WASM9P_FS_TYPES_ERROR_READ_ONLY;
    return false;
}

bool exports_wasm9p_fs_backend_set_size(uint64_t node, uint64_t size, error_t *err) {
    (void)node; (void)size;
    *err = WASM9P_FS_TYPES_ERROR_READ_ONLY;
    return false;
}

bool exports_wasm9p_fs_backend_create(uint64_t dir, fs_plugin_string_t *name, exports_wasm9p_fs_backend_kind_t kind, uint32_t mode, fs_plugin_string_t *target, uint64_t *ret, error_t *err) {
    (void)dir; (void)kind; (void)mode; (void)ret;
    fs_plugin_string_free(name);
    fs_plugin_string_free(target);
    *err = WASM9P_FS_TYPES_ERROR_READ_ONLY;
    return false;
}

bool exports_wasm9p_fs_backend_unlink(uint64_t dir, fs_plugin_string_t *name, error_t *err) {
    (void)dir;
    fs_plugin_string_free(name);
    *err = WASM9P_FS_TYPES_ERROR_READ_ONLY;
    return false;
}

bool exports_wasm9p_fs_backend_rename(uint64_t from_dir, fs_plugin_string_t *name, uint64_t to_dir, fs_plugin_string_t *to_name, error_t *err) {
    (void)from_dir; (void)to_dir;
    fs_plugin_string_free(name);
    fs_plugin_string_free(to_name);
    *err = WASM9P_FS_TYPES_ERROR_READ_ONLY;
    return false;
}
