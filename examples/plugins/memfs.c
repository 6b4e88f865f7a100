// memfs: a writable file system that lives in the plugin's memory (a tmpfs as a
// component). Mount it with
//   wasm9p run --mount type=plugin,component=memfs.wasm,target=/scratch ...
// It starts with one file, /README. Everything written is lost when the host exits.
// Built by scripts/build-plugin from the bindings wit-bindgen generates for the
// fs-plugin world (wit/fs.wit).
//
// Nodes are numbered from 1 (the root) in creation order and never reused, so a
// number the host still holds never names another file. A node unlinked while the
// host still has it open is gone for reads too (NOT-FOUND): memfs does not keep
// unlinked files.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs_plugin.h"

typedef exports_wasm9p_fs_backend_error_t error_t;
typedef exports_wasm9p_fs_backend_attr_t attr_t;

#define MAX_NAME 255
#define MAX_FILE (64u << 20)

struct node {
    int live;
    uint8_t kind;
    uint32_t mode;
    uint64_t parent;
    char name[MAX_NAME + 1];
    uint8_t *data; // file contents or symlink target
    size_t size, cap;
    uint64_t mtime_sec;
    uint32_t mtime_nsec;
};

static struct node *nodes; // nodes[0] unused: node numbers start at 1
static uint64_t count, cap;

static void touch(struct node *n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    n->mtime_sec = (uint64_t)ts.tv_sec;
    n->mtime_nsec = (uint32_t)ts.tv_nsec;
}

static struct node *get(uint64_t id) {
    if (id == 0 || id > count || !nodes[id].live) return NULL;
    return &nodes[id];
}

// A copy of a component string as a C string, freeing the argument (it is ours).
static int take_name(fs_plugin_string_t *s, char out[MAX_NAME + 1]) {
    int ok = s->len > 0 && s->len <= MAX_NAME && memchr(s->ptr, '/', s->len) == NULL &&
             memchr(s->ptr, 0, s->len) == NULL;
    if (ok) {
        memcpy(out, s->ptr, s->len);
        out[s->len] = 0;
        ok = strcmp(out, ".") != 0 && strcmp(out, "..") != 0;
    }
    fs_plugin_string_free(s);
    return ok;
}

static uint64_t add(uint64_t parent, const char *name, uint8_t kind, uint32_t mode) {
    if (count + 1 >= cap) {
        uint64_t next = cap ? cap * 2 : 64;
        struct node *grown = realloc(nodes, next * sizeof *nodes);
        if (!grown) return 0;
        memset(grown + cap, 0, (next - cap) * sizeof *nodes);
        nodes = grown;
        cap = next;
    }
    uint64_t id = ++count;
    struct node *n = &nodes[id];
    n->live = 1;
    n->kind = kind;
    n->mode = mode & 07777;
    n->parent = parent;
    strcpy(n->name, name);
    touch(n);
    return id;
}

static uint64_t child(uint64_t dir, const char *name) {
    for (uint64_t i = 1; i <= count; i++)
        if (nodes[i].live && nodes[i].parent == dir && i != dir && strcmp(nodes[i].name, name) == 0)
            return i;
    return 0;
}

static int has_children(uint64_t dir) {
    for (uint64_t i = 2; i <= count; i++)
        if (nodes[i].live && nodes[i].parent == dir) return 1;
    return 0;
}

static int set_data(struct node *n, const uint8_t *bytes, size_t len, size_t at) {
    if (at + len > MAX_FILE) return 0;
    if (at + len > n->cap) {
        size_t next = n->cap ? n->cap : 256;
        while (next < at + len) next *= 2;
        uint8_t *grown = realloc(n->data, next);
        if (!grown) return 0;
        n->data = grown;
        n->cap = next;
    }
    if (at > n->size) memset(n->data + n->size, 0, at - n->size);
    memcpy(n->data + at, bytes, len);
    if (at + len > n->size) n->size = at + len;
    return 1;
}

static void init(void) {
    if (count) return;
    uint64_t root = add(0, "", WASM9P_FS_TYPES_KIND_DIRECTORY, 0755);
    nodes[root].parent = root;
    static const char readme[] = "memfs: files in this mount live in the plugin's memory.\n";
    uint64_t r = add(root, "README", WASM9P_FS_TYPES_KIND_FILE, 0644);
    set_data(&nodes[r], (const uint8_t *)readme, sizeof readme - 1, 0);
}

uint64_t exports_wasm9p_fs_backend_root(void) {
    init();
    return 1;
}

bool exports_wasm9p_fs_backend_writable(void) { return true; }

bool exports_wasm9p_fs_backend_lookup_child(uint64_t dir, fs_plugin_string_t *name, uint64_t *ret, error_t *err) {
    init();
    char n[MAX_NAME + 1];
    struct node *d = get(dir);
    if (!take_name(name, n)) { *err = WASM9P_FS_TYPES_ERROR_INVALID; return false; }
    if (!d) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    if (d->kind != WASM9P_FS_TYPES_KIND_DIRECTORY) { *err = WASM9P_FS_TYPES_ERROR_NOT_DIRECTORY; return false; }
    *ret = child(dir, n);
    if (!*ret) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    return true;
}

bool exports_wasm9p_fs_backend_getattr(uint64_t node, attr_t *ret, error_t *err) {
    init();
    struct node *n = get(node);
    if (!n) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    uint64_t links = 1;
    if (n->kind == WASM9P_FS_TYPES_KIND_DIRECTORY) {
        links = 2;
        for (uint64_t i = 2; i <= count; i++)
            if (nodes[i].live && nodes[i].parent == node && nodes[i].kind == WASM9P_FS_TYPES_KIND_DIRECTORY) links++;
    }
    *ret = (attr_t){n->kind, n->mode, n->size, links, n->mtime_sec, n->mtime_nsec};
    return true;
}

bool exports_wasm9p_fs_backend_readlink(uint64_t node, fs_plugin_string_t *ret, error_t *err) {
    struct node *n = get(node);
    if (!n) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    if (n->kind != WASM9P_FS_TYPES_KIND_SYMLINK) { *err = WASM9P_FS_TYPES_ERROR_INVALID; return false; }
    fs_plugin_string_dup_n(ret, (const char *)n->data, n->size);
    return true;
}

bool exports_wasm9p_fs_backend_read(uint64_t node, uint64_t offset, uint32_t len, fs_plugin_list_u8_t *ret, error_t *err) {
    struct node *n = get(node);
    if (!n) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    if (n->kind == WASM9P_FS_TYPES_KIND_DIRECTORY) { *err = WASM9P_FS_TYPES_ERROR_IS_DIRECTORY; return false; }
    size_t from = offset < n->size ? (size_t)offset : n->size;
    size_t take = n->size - from < len ? n->size - from : len;
    ret->ptr = take ? malloc(take) : NULL;
    ret->len = take;
    if (take) memcpy(ret->ptr, n->data + from, take);
    return true;
}

bool exports_wasm9p_fs_backend_readdir(uint64_t dir, exports_wasm9p_fs_backend_list_dirent_t *ret, error_t *err) {
    init();
    struct node *d = get(dir);
    if (!d) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    if (d->kind != WASM9P_FS_TYPES_KIND_DIRECTORY) { *err = WASM9P_FS_TYPES_ERROR_NOT_DIRECTORY; return false; }
    size_t n = 0;
    for (uint64_t i = 2; i <= count; i++)
        if (nodes[i].live && nodes[i].parent == dir) n++;
    ret->ptr = n ? malloc(n * sizeof *ret->ptr) : NULL;
    ret->len = 0;
    for (uint64_t i = 2; i <= count; i++) {
        if (!nodes[i].live || nodes[i].parent != dir) continue;
        exports_wasm9p_fs_backend_dirent_t *e = &ret->ptr[ret->len++];
        fs_plugin_string_dup(&e->name, nodes[i].name);
        e->node = i;
        e->kind = nodes[i].kind;
    }
    return true;
}

bool exports_wasm9p_fs_backend_write(uint64_t node, uint64_t offset, fs_plugin_list_u8_t *data, uint32_t *ret, error_t *err) {
    struct node *n = get(node);
    bool ok = false;
    if (!n) *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND;
    else if (n->kind != WASM9P_FS_TYPES_KIND_FILE) *err = WASM9P_FS_TYPES_ERROR_IS_DIRECTORY;
    else if (offset > MAX_FILE || !set_data(n, data->ptr, data->len, (size_t)offset)) *err = WASM9P_FS_TYPES_ERROR_IO;
    else {
        touch(n);
        *ret = (uint32_t)data->len;
        ok = true;
    }
    fs_plugin_list_u8_free(data);
    return ok;
}

bool exports_wasm9p_fs_backend_set_size(uint64_t node, uint64_t size, error_t *err) {
    struct node *n = get(node);
    if (!n) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    if (n->kind != WASM9P_FS_TYPES_KIND_FILE) { *err = WASM9P_FS_TYPES_ERROR_IS_DIRECTORY; return false; }
    if (size > MAX_FILE) { *err = WASM9P_FS_TYPES_ERROR_INVALID; return false; }
    if (size > n->size) {
        static const uint8_t none[1];
        if (!set_data(n, none, 0, (size_t)size)) { *err = WASM9P_FS_TYPES_ERROR_IO; return false; }
        n->size = (size_t)size;
    } else {
        n->size = (size_t)size;
    }
    touch(n);
    return true;
}

bool exports_wasm9p_fs_backend_create(uint64_t dir, fs_plugin_string_t *name, exports_wasm9p_fs_backend_kind_t kind, uint32_t mode, fs_plugin_string_t *target, uint64_t *ret, error_t *err) {
    char n[MAX_NAME + 1];
    bool ok = false;
    struct node *d = get(dir);
    if (!take_name(name, n)) *err = WASM9P_FS_TYPES_ERROR_INVALID;
    else if (!d) *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND;
    else if (d->kind != WASM9P_FS_TYPES_KIND_DIRECTORY) *err = WASM9P_FS_TYPES_ERROR_NOT_DIRECTORY;
    else if (child(dir, n)) *err = WASM9P_FS_TYPES_ERROR_EXISTS;
    else if (!(*ret = add(dir, n, kind, mode))) *err = WASM9P_FS_TYPES_ERROR_IO;
    else {
        if (kind == WASM9P_FS_TYPES_KIND_SYMLINK) set_data(&nodes[*ret], target->ptr, target->len, 0);
        touch(&nodes[dir]);
        ok = true;
    }
    fs_plugin_string_free(target);
    return ok;
}

static void drop_node(uint64_t id) {
    nodes[id].live = 0;
    free(nodes[id].data);
    nodes[id].data = NULL;
    nodes[id].size = nodes[id].cap = 0;
}

bool exports_wasm9p_fs_backend_unlink(uint64_t dir, fs_plugin_string_t *name, error_t *err) {
    char n[MAX_NAME + 1];
    if (!take_name(name, n)) { *err = WASM9P_FS_TYPES_ERROR_INVALID; return false; }
    uint64_t id = get(dir) ? child(dir, n) : 0;
    if (!id) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    if (nodes[id].kind == WASM9P_FS_TYPES_KIND_DIRECTORY && has_children(id)) { *err = WASM9P_FS_TYPES_ERROR_NOT_EMPTY; return false; }
    drop_node(id);
    touch(&nodes[dir]);
    return true;
}

bool exports_wasm9p_fs_backend_rename(uint64_t from_dir, fs_plugin_string_t *name, uint64_t to_dir, fs_plugin_string_t *to_name, error_t *err) {
    char from[MAX_NAME + 1], to[MAX_NAME + 1];
    int ok_from = take_name(name, from), ok_to = take_name(to_name, to);
    if (!ok_from || !ok_to) { *err = WASM9P_FS_TYPES_ERROR_INVALID; return false; }
    struct node *dst = get(to_dir);
    uint64_t id = get(from_dir) ? child(from_dir, from) : 0;
    if (!id || !dst) { *err = WASM9P_FS_TYPES_ERROR_NOT_FOUND; return false; }
    if (dst->kind != WASM9P_FS_TYPES_KIND_DIRECTORY) { *err = WASM9P_FS_TYPES_ERROR_NOT_DIRECTORY; return false; }
    // A directory may not move into itself or below it.
    for (uint64_t up = to_dir; ; up = nodes[up].parent) {
        if (up == id) { *err = WASM9P_FS_TYPES_ERROR_INVALID; return false; }
        if (up == 1) break;
    }
    uint64_t there = child(to_dir, to);
    if (there == id) return true;
    if (there) {
        int dir_from = nodes[id].kind == WASM9P_FS_TYPES_KIND_DIRECTORY;
        int dir_there = nodes[there].kind == WASM9P_FS_TYPES_KIND_DIRECTORY;
        if (dir_there && !dir_from) { *err = WASM9P_FS_TYPES_ERROR_IS_DIRECTORY; return false; }
        if (!dir_there && dir_from) { *err = WASM9P_FS_TYPES_ERROR_NOT_DIRECTORY; return false; }
        if (dir_there && has_children(there)) { *err = WASM9P_FS_TYPES_ERROR_NOT_EMPTY; return false; }
        drop_node(there);
    }
    nodes[id].parent = to_dir;
    strcpy(nodes[id].name, to);
    touch(&nodes[from_dir]);
    touch(dst);
    return true;
}
