// A component of the `sandbox` world (wit/fs.wit): mounts a 9p export and a plugin at
// run time through wasm9p:fs/mounts, reads and writes through both, lists them, reads
// their counters, is refused what the host did not allow, and unmounts with a file open.
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

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int data = mount_spec("data", argv[1]);
    show_file("/mnt/data/hello.txt");
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
