// A component of the `sandbox` world (wit/fs.wit): mounts a 9p export and a plugin at
// run time through wasm9p:fs/mounts, reads and writes through both, lists them, reads
// their counters, is refused what the host did not allow, and unmounts with a file open.
// It also calls the world's own wasi:filesystem import (not only wasi-libc's): the
// preopens, and a stat through `/` of what it mounted.
//
// usage: sandbox_mounts NINEP_SPEC PLUGIN_SPEC DENIED_SPEC
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox.h"

typedef wasm9p_fs_mounts_mount_error_t mount_error_t;

static const char *why(mount_error_t *e) {
    static char buf[512];
    const char *tag[] = {"denied", "bad-spec", "unavailable", "no-such-mount"};
    if (e->tag == WASM9P_FS_MOUNTS_MOUNT_ERROR_NO_SUCH_MOUNT) return tag[e->tag];
    sandbox_string_t *s = &e->val.denied; // the three string cases share the layout
    snprintf(buf, sizeof buf, "%s: %.*s", tag[e->tag], (int)s->len, (const char *)s->ptr);
    wasm9p_fs_mounts_mount_error_free(e);
    return buf;
}

static int mount_spec(const char *label, const char *spec) {
    sandbox_string_t s;
    sandbox_string_dup(&s, spec);
    wasm9p_fs_mounts_mount_id_t id;
    mount_error_t err;
    if (wasm9p_fs_mounts_mount(&s, &id, &err)) {
        printf("mount %s: ok\n", label);
        return (int)id;
    }
    printf("mount %s: %s\n", label, why(&err));
    return -1;
}

static void show_file(const char *path) {
    char buf[256];
    int fd = open(path, O_RDONLY);
    if (fd < 0) { printf("read %s: %s\n", path, strerror(errno)); return; }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    printf("read %s: %s", path, buf);
}

// Through the world's wasi:filesystem import: the preopens' names, and the size of
// PATH (absolute) found from the `/` preopen.
static void wasi_stat(const char *path) {
    wasi_filesystem_preopens_list_tuple2_own_descriptor_string_t dirs;
    wasi_filesystem_preopens_get_directories(&dirs);
    printf("preopens:");
    int root = -1;
    for (size_t i = 0; i < dirs.len; i++) {
        sandbox_string_t *name = &dirs.ptr[i].f1;
        printf(" %.*s", (int)name->len, (const char *)name->ptr);
        if (name->len == 1 && name->ptr[0] == '/') root = (int)i;
    }
    printf("\n");
    if (root >= 0) {
        sandbox_string_t rel;
        sandbox_string_dup(&rel, path + 1);
        wasi_filesystem_types_descriptor_stat_t st;
        wasi_filesystem_types_error_code_t code;
        wasi_filesystem_types_borrow_descriptor_t dir =
            wasi_filesystem_types_borrow_descriptor(dirs.ptr[root].f0);
        if (wasi_filesystem_types_method_descriptor_stat_at(dir, WASI_FILESYSTEM_TYPES_PATH_FLAGS_SYMLINK_FOLLOW, &rel,
                                                            &st, &code))
            printf("wasi:filesystem stat %s: %llu bytes\n", path, (unsigned long long)st.size);
        else
            printf("wasi:filesystem stat %s: error-code %d\n", path, (int)code);
        sandbox_string_free(&rel);
    }
    for (size_t i = 0; i < dirs.len; i++) wasi_filesystem_types_descriptor_drop_own(dirs.ptr[i].f0);
    wasi_filesystem_preopens_list_tuple2_own_descriptor_string_free(&dirs);
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int data = mount_spec("data", argv[1]);
    show_file("/mnt/data/hello.txt");
    wasi_stat("/mnt/data/hello.txt");
    int scratch = mount_spec("scratch", argv[2]);
    show_file("/mnt/scratch/README");
    int fd = open("/mnt/scratch/note", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    printf("write scratch: %s\n", fd >= 0 && write(fd, "noted\n", 6) == 6 && close(fd) == 0 ? "ok" : strerror(errno));
    show_file("/mnt/scratch/note");

    wasm9p_fs_mounts_list_mount_info_t list;
    wasm9p_fs_mounts_list(&list);
    for (size_t i = 0; i < list.len; i++) {
        wasm9p_fs_mounts_mount_info_t *m = &list.ptr[i];
        printf("list: %.*s %.*s %s\n", (int)m->target.len, (const char *)m->target.ptr, (int)m->kind.len,
               (const char *)m->kind.ptr, (int)m->id == data ? "(data)" : (int)m->id == scratch ? "(scratch)" : "");
    }
    wasm9p_fs_mounts_list_mount_info_free(&list);

    wasm9p_fs_mounts_mount_stats_t stats;
    mount_error_t err;
    if (wasm9p_fs_mounts_stats((wasm9p_fs_mounts_mount_id_t)data, &stats, &err)) {
        uint64_t walks = 0;
        for (size_t i = 0; i < stats.rpc.len; i++)
            if (stats.rpc.ptr[i].f0.len == 4 && memcmp(stats.rpc.ptr[i].f0.ptr, "walk", 4) == 0) walks = stats.rpc.ptr[i].f1;
        printf("stats data: %s, walks %s\n", stats.rpc_total > 0 ? "requests counted" : "NO REQUESTS",
               walks > 0 ? "counted" : "MISSING");
        wasm9p_fs_mounts_mount_stats_free(&stats);
    } else {
        printf("stats data: %s\n", why(&err));
    }

    mount_spec("denied", argv[3]);
    mount_spec("nonsense", "type=nonsense,target=/mnt/x");
    mount_spec("twice", argv[1]);

    // Unmount with a file open: the open file keeps working, the path is gone.
    int held = open("/mnt/data/hello.txt", O_RDONLY);
    printf("unmount data: %s\n", wasm9p_fs_mounts_unmount((wasm9p_fs_mounts_mount_id_t)data, &err) ? "ok" : why(&err));
    char buf[64];
    ssize_t n = read(held, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    printf("read held fd after unmount: %s", n > 0 ? buf : "FAILED\n");
    close(held);
    struct stat st;
    printf("stat after unmount: %s\n", stat("/mnt/data/hello.txt", &st) == 0 ? "STILL THERE" : strerror(errno));
    printf("unmount again: %s\n", wasm9p_fs_mounts_unmount((wasm9p_fs_mounts_mount_id_t)data, &err) ? "ok" : why(&err));
    printf("stats unknown: %s\n", wasm9p_fs_mounts_stats(999, &stats, &err) ? "ok" : why(&err));
    show_file("/mnt/scratch/note");
    return 0;
}
