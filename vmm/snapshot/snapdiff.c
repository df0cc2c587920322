/* Diff snapshots: dirty tracking, the diff memory file, and restoring a
 * chain of diffs. Contracts in snapdiff.h. */
#include "vmm/snapshot/snapdiff.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/openat2.h>

#include "vmm/base/fullio.h"
#include "vmm/base/log.h"
#include "vmm/snapshot/snapvm.h"

#define PAGE 4096ul
/* More runs than this over a whole chain are read in instead of mapped
 * (each mapped run is a VMA; vm.max_map_count is 65530 by default). */
#define MAP_RUN_BUDGET 16384u

/* ---- tracking ---- */

int snapdiff_setup(struct moat_vm *vm)
{
    struct snapvm *sv = snapvm_of(vm);
    if (!(vm->flags & MOAT_F_DIRTY_LOG))
        return 0;
    uint64_t words = snap_bitmap_words(vm->ram_size);
    sv->dirty = calloc(words ? words : 1, sizeof(uint64_t));
    if (!sv->dirty)
        return -ENOMEM;
    vm->mem.dirty = sv->dirty;
    vm->mem.dirty_base = vm->ram;
    vm->mem.dirty_pages = vm->ram_size / PAGE;
    sv->dirty_log = true;
    return KVM_MEM_LOG_DIRTY_PAGES;
}

void snapdiff_free(struct moat_vm *vm)
{
    struct snapvm *sv = snapvm_of(vm);
    free(sv->dirty);
    sv->dirty = NULL;
    vm->mem.dirty = NULL;
    vm->mem.dirty_base = NULL;
    vm->mem.dirty_pages = 0;
    /* Tracking is off now (snapvm.c's mem_refused hook also calls this
     * when KVM refuses dirty logging on restore): collect/sections must not
     * use the freed bitmap or ask KVM for a log its slots do not keep. */
    sv->dirty_log = false;
    if (sv->last_snap) {
        free(sv->last_snap->state_path);
        free(sv->last_snap->mem_path);
        free(sv->last_snap);
        sv->last_snap = NULL;
    }
}

int snapdiff_harvest(struct moat_vm *vm)
{
    struct snapvm *sv = snapvm_of(vm);
    if (!sv->dirty_log)
        return -ENOTSUP;
    for (unsigned s = 0; s < vm->mem.n; s++) {
        const struct gmem_region *rg = &vm->mem.r[s];
        uint64_t npages = rg->size / PAGE, words = (npages + 63) / 64;
        uint64_t *kb = calloc(words ? words : 1, sizeof(uint64_t));
        if (!kb)
            return -ENOMEM;
        struct kvm_dirty_log dl = { .slot = s, .dirty_bitmap = kb };
        if (ioctl(vm->vm_fd, KVM_GET_DIRTY_LOG, &dl) < 0) {
            int e = errno;
            free(kb);
            return -e;
        }
        /* KVM cleared its log: the bits are ours to keep until committed. */
        uint64_t base = (uint64_t)(rg->host - vm->ram) / PAGE;
        for (uint64_t w = 0; w < words; w++) {
            uint64_t v = kb[w];
            while (v) {
                uint64_t pg = base + 64 * w + (uint64_t)__builtin_ctzll(v);
                v &= v - 1;
                __atomic_fetch_or(&sv->dirty[pg / 64], 1ull << (pg % 64), __ATOMIC_RELAXED);
            }
        }
        free(kb);
    }
    return 0;
}

uint64_t snapdiff_count(struct moat_vm *vm)
{
    struct snapvm *sv = snapvm_of(vm);
    uint64_t n = 0;
    for (uint64_t w = 0, words = sv->dirty ? snap_bitmap_words(vm->ram_size) : 0; w < words; w++)
        n += (uint64_t)__builtin_popcountll(__atomic_load_n(&sv->dirty[w], __ATOMIC_RELAXED));
    return n;
}

int snapdiff_collect(struct moat_vm *vm, uint64_t **out)
{
    struct snapvm *sv = snapvm_of(vm);
    *out = NULL;
    int r = snapdiff_harvest(vm);
    if (r < 0)
        return r;
    /* The bits move into the snapshot's copy: a page written from now on
     * (the guest runs again before the files are durable) is the next
     * snapshot's. A failed snapshot gives them back (snapdiff_giveback). */
    uint64_t words = snap_bitmap_words(vm->ram_size);
    uint64_t *bm = malloc(words ? words * 8 : 8);
    if (!bm)
        return -ENOMEM;
    for (uint64_t w = 0; w < words; w++)
        bm[w] = htole64(__atomic_exchange_n(&sv->dirty[w], 0, __ATOMIC_RELAXED));
    *out = bm;
    return 0;
}

void snapdiff_giveback(struct moat_vm *vm, const uint64_t *bm)
{
    struct snapvm *sv = snapvm_of(vm);
    if (!sv->dirty || !bm)
        return;
    uint64_t words = snap_bitmap_words(vm->ram_size);
    for (uint64_t w = 0; w < words; w++)
        __atomic_fetch_or(&sv->dirty[w], le64toh(bm[w]), __ATOMIC_RELAXED);
}

int snapdiff_set_last(struct moat_vm *vm, const char *state_path, const char *mem_path,
                      uint64_t checksum, uint32_t depth)
{
    struct snapvm *sv = snapvm_of(vm);
    char *s = realpath(state_path, NULL), *m = realpath(mem_path, NULL);
    struct snapdiff_last *l = calloc(1, sizeof(*l));
    if (!s || !m || !l) {
        int e = (!s || !m) ? errno : ENOMEM;
        free(s);
        free(m);
        free(l);
        return -e;
    }
    *l = (struct snapdiff_last){ s, m, checksum, depth };
    if (sv->last_snap) {
        free(sv->last_snap->state_path);
        free(sv->last_snap->mem_path);
        free(sv->last_snap);
    }
    sv->last_snap = l;
    return 0;
}

int snapdiff_same_file(const char *path, const char *other)
{
    struct stat a, b;
    if (stat(path, &a) == 0 && stat(other, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return -EEXIST;
    return 0;
}

/* ---- restore ---- */

/* Open rel (checked by snap_parent_beneath: relative, no empty, "." or
 * ".." component) beneath the directory rootfd, following no symlink on
 * the way: openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, or, on a
 * kernel without it (before 5.6), one O_NOFOLLOW component at a time. An
 * fd or -errno (-ELOOP for a symlink, -EXDEV for an escape). Opened
 * O_NONBLOCK (a FIFO named there must not hang the restore; the callers
 * refuse anything but a regular file), cleared again. */
static int open_beneath_nb(int rootfd, const char *rel);
static int open_beneath(int rootfd, const char *rel)
{
    int fd = open_beneath_nb(rootfd, rel);
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
    }
    return fd;
}

static int open_beneath_nb(int rootfd, const char *rel)
{
    struct open_how how = {
        .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
    if (fd >= 0)
        return (int)fd;
    if (errno != ENOSYS)
        return -errno;
    int dfd = rootfd;
    char comp[NAME_MAX + 1];
    for (const char *c = rel;;) {
        const char *e = strchr(c, '/');
        size_t n = e ? (size_t)(e - c) : strlen(c);
        int nfd = -ENAMETOOLONG;
        if (n <= NAME_MAX) {
            memcpy(comp, c, n);
            comp[n] = 0;
            nfd = openat(dfd, comp, e ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                                      : O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
            if (nfd < 0) {
                nfd = -errno;
                struct stat ls;     /* a symlink to a directory: ENOTDIR with O_PATH | O_NOFOLLOW */
                if (nfd == -ENOTDIR && e && fstatat(dfd, comp, &ls, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISLNK(ls.st_mode))
                    nfd = -ELOOP;
            }
        }
        if (dfd != rootfd)
            close(dfd);
        if (nfd < 0 || !e)
            return nfd;
        dfd = nfd;
        c = e + 1;
    }
}

/* A parent's file (what a state file names: untrusted) opened beneath the
 * chain's root, or a configuration error naming it. */
static int open_parent(const struct snapdiff_chain *c, const char *what, const char *path,
                       const char *child, struct moat_error *err)
{
    const char *why = NULL, *rel = snap_parent_beneath(c->root, path, &why);
    if (!rel)
        return seterr(err, 1, -EACCES, "%s %s (named by %s): %s %s: refused (restore with a snapshot "
                      "root that holds the whole chain)", what, path, child, why, c->root);
    int fd = open_beneath(c->root_fd, rel);
    if (fd == -ELOOP || fd == -EXDEV)
        return seterr(err, 1, -EACCES, "%s %s (named by %s): a symlink on its path beneath the snapshot "
                      "root %s: refused", what, path, child, c->root);
    if (fd < 0)
        return seterr(err, 1, fd, "%s %s (of %s): %s", what, path, child, strerror(-fd));
    return fd;
}

static int read_fd(int fd, uint8_t **buf, size_t *len)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -EINVAL;
    }
    if ((uint64_t)st.st_size > SNAP_HEADER_SIZE + (uint64_t)SNAP_MAX_PAYLOAD) {
        close(fd);
        return -EFBIG;
    }
    *len = (size_t)st.st_size;
    *buf = malloc(*len ? *len : 1);
    if (!*buf) {
        close(fd);
        return -ENOMEM;
    }
    ssize_t got = read_full(fd, *buf, *len);
    close(fd);
    if (got != (ssize_t)*len) {
        free(*buf);
        *buf = NULL;
        return -EIO;
    }
    return 0;
}

/* One diff layer: its bitmap (checked) and its memory file (exact size). */
static int open_layer(struct snapdiff_chain *c, const char *state_path, const char *mem_path,
                      const char *child, const struct snap_section *secs, size_t nsecs,
                      struct moat_error *err)
{
    struct snapdiff_layer *l = &c->l[c->n];
    l->mem_fd = -1;
    const struct snap_section *ps = snap_find(secs, nsecs, SNAP_DIFF_PAGES, 0);
    const char *why = NULL;
    if (!ps)
        return seterr(err, 1, -EINVAL, "state file %s: a diff without a page bitmap", state_path);
    if (snap_bitmap_check(ps->data, ps->len, c->mem_size, &why) < 0)
        return seterr(err, 1, -EINVAL, "state file %s: %s", state_path, why);
    l->bm = ps->data;
    if (child) {    /* a parent's: named by its child's state file */
        l->mem_fd = open_parent(c, "diff memory file", mem_path, child, err);
        if (l->mem_fd < 0)
            return l->mem_fd;
    } else if ((l->mem_fd = open(mem_path, O_RDONLY | O_CLOEXEC)) < 0)
        return seterr(err, 1, -errno, "diff memory file %s: %s", mem_path, strerror(errno));
    c->n++;
    struct stat st;
    if (fstat(l->mem_fd, &st) < 0)
        return seterr(err, 1, -errno, "diff memory file %s: %s", mem_path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return seterr(err, 1, -EINVAL, "diff memory file %s: not a regular file", mem_path);
    if ((uint64_t)st.st_size != c->mem_size)
        return seterr(err, 1, -EINVAL, "diff memory file %s: size %lld, the snapshot needs %llu bytes",
                      mem_path, (long long)st.st_size, (unsigned long long)c->mem_size);
    return 0;
}

/* The chain's root: the caller's, or the top state file's directory;
 * resolved (a symlink in it is the caller's choice) and opened. */
static int open_root(struct snapdiff_chain *c, const char *state_path, const char *root,
                     struct moat_error *err)
{
    char *dir = NULL;
    if (!root) {
        char *top = realpath(state_path, NULL);
        if (!top)
            return seterr(err, 1, -errno, "state file %s: %s", state_path, strerror(errno));
        char *slash = strrchr(top, '/');
        if (slash == top)
            slash[1] = 0;
        else
            *slash = 0;
        dir = top;
    } else if (!(dir = realpath(root, NULL)))
        return seterr(err, 1, -errno, "snapshot root %s: %s", root, strerror(errno));
    c->root = dir;
    c->root_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (c->root_fd < 0)
        return seterr(err, 1, -errno, "snapshot root %s: %s", dir, strerror(errno));
    return 0;
}

int snapdiff_chain_open(struct snapdiff_chain *c, const char *state_path, const char *mem_path,
                        const char *root, const struct snap_section *secs, size_t nsecs,
                        uint64_t mem_size, struct moat_error *err)
{
    memset(c, 0, sizeof(*c));
    c->mem_size = mem_size;
    c->root_fd = c->base_fd = -1;
    const struct snap_section *par = snap_find(secs, nsecs, SNAP_DIFF_PARENT, 0);
    if (!par) {
        if (snap_find(secs, nsecs, SNAP_DIFF_PAGES, 0))
            return seterr(err, 1, -EINVAL, "state file %s: a page bitmap without a parent", state_path);
        return 0;
    }
    int rr = open_root(c, state_path, root, err);
    if (rr < 0) {
        snapdiff_chain_close(c);
        return rr;
    }
    char (*pst)[SNAP_PARENT_PATH_MAX + 1] = malloc(3 * sizeof(*pst));
    struct snap_section *psecs = calloc(SNAP_MAX_SECTIONS, sizeof(*psecs));
    if (!pst || !psecs) {
        free(pst);
        free(psecs);
        return seterr(err, 0, -ENOMEM, "out of memory");
    }
    char *pstate = pst[0], *pmem = pst[1], *child = pst[2];
    snprintf(child, SNAP_PARENT_PATH_MAX + 1, "%s", state_path);
    int r = open_layer(c, state_path, mem_path, NULL, secs, nsecs, err);
    uint32_t depth = 0, want = 0;
    bool top = true;
    while (r == 0 && par) {
        const char *why = NULL;
        uint64_t sum;
        if (snap_parent_decode(par->data, par->len, &sum, &depth, pstate, SNAP_PARENT_PATH_MAX + 1,
                               pmem, SNAP_PARENT_PATH_MAX + 1, &why) < 0) {
            r = seterr(err, 1, -EINVAL, "state file %s: %s", child, why);
            break;
        }
        if (top)
            c->depth = depth;
        else if (depth != want) {
            r = seterr(err, 1, -EINVAL, "state file %s: diff depth %u, its child expects %u", child, depth, want);
            break;
        }
        top = false;
        want = depth - 1;
        uint8_t *buf = NULL;
        size_t len = 0;
        int sfd = open_parent(c, "parent state file", pstate, child, err);
        if (sfd < 0) {
            r = sfd;
            break;
        }
        r = read_fd(sfd, &buf, &len);
        if (r < 0) {
            r = seterr(err, 1, r, "parent state file %s (of %s): %s", pstate, child, strerror(-r));
            break;
        }
        size_t np = 0;
        r = snap_parse(buf, len, psecs, SNAP_MAX_SECTIONS, &np, &why);
        if (r < 0) {
            free(buf);
            r = seterr(err, 1, r, "parent state file %s: %s", pstate, why);
            break;
        }
        if (snap_file_checksum(buf, len) != sum) {
            free(buf);
            r = seterr(err, 1, -EINVAL, "parent state file %s: not the snapshot %s was taken against "
                       "(checksum mismatch: replaced or rewritten?)", pstate, child);
            break;
        }
        struct snap_meta pm;
        const struct snap_section *ms = snap_find(psecs, np, SNAP_META, 0);
        if (!ms || ms->len != sizeof(pm) || (memcpy(&pm, ms->data, sizeof(pm)), pm.mem_size != mem_size)) {
            free(buf);
            r = seterr(err, 1, -EINVAL, "parent state file %s: no metadata or a different memory size", pstate);
            break;
        }
        par = snap_find(psecs, np, SNAP_DIFF_PARENT, 0);
        if (!par) {
            free(buf);
            if (want != 0) {
                r = seterr(err, 1, -EINVAL, "state file %s: the chain ends %u diff(s) early", pstate, want);
                break;
            }
            if (snap_find(psecs, np, SNAP_DIFF_PAGES, 0)) {
                r = seterr(err, 1, -EINVAL, "state file %s: a page bitmap without a parent", pstate);
                break;
            }
            c->base_mem = strdup(pmem);
            if (!c->base_mem) {
                r = seterr(err, 0, -ENOMEM, "out of memory");
                break;
            }
            c->base_fd = open_parent(c, "memory file", pmem, child, err);
            if (c->base_fd < 0)
                r = c->base_fd;
            break;
        }
        if (want == 0 || c->n >= SNAP_DIFF_MAX_DEPTH) {
            free(buf);
            r = seterr(err, 1, -EINVAL, "state file %s: diff chain deeper than recorded (or than %u)",
                       pstate, SNAP_DIFF_MAX_DEPTH);
            break;
        }
        c->l[c->n].state_buf = buf;   /* owned by the layer even if opening it fails */
        r = open_layer(c, pstate, pmem, child, psecs, np, err);
        memcpy(child, pstate, SNAP_PARENT_PATH_MAX + 1);
        /* par (in psecs) is decoded before psecs is reused; its data is in buf */
    }
    free(pst);
    free(psecs);
    if (r < 0)
        snapdiff_chain_close(c);
    return r;
}

static int read_in(int fd, uint8_t *dst, size_t len, off_t off)
{
    ssize_t n = pread_full(fd, dst, len, off);
    return n < 0 ? (int)n : (size_t)n < len ? -EIO : 0;
}

int snapdiff_map(struct moat_vm *vm, void *arg)
{
    struct snapdiff_chain *c = arg;
    uint64_t npages = c->mem_size / PAGE, runs = 0;
    for (unsigned i = 0; i < c->n; i++) {
        uint64_t nr;
        snap_bitmap_count(c->l[i].bm, npages, &nr);
        runs += nr;
    }
    bool map = runs <= MAP_RUN_BUDGET;
    if (!map)
        log_debug("restore: %llu diff runs: reading them in instead of mapping", (unsigned long long)runs);
    for (unsigned i = c->n; i-- > 0;) {     /* bottom diff first */
        uint64_t run, at = 0;
        while ((at = snap_bitmap_next_run(c->l[i].bm, npages, at, &run)) < npages) {
            uint8_t *dst = vm->ram + at * PAGE;
            size_t len = (size_t)(run * PAGE);
            if (map) {
                void *p = mmap(dst, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_NORESERVE,
                               c->l[i].mem_fd, (off_t)(at * PAGE));
                if (p == MAP_FAILED)
                    return -errno;
            } else {
                int r = read_in(c->l[i].mem_fd, dst, len, (off_t)(at * PAGE));
                if (r < 0)
                    return r;
            }
            at += run;
        }
    }
    return 0;
}

void snapdiff_chain_close(struct snapdiff_chain *c)
{
    for (unsigned i = 0; i < SNAP_DIFF_MAX_DEPTH; i++) {
        if (i < c->n && c->l[i].mem_fd >= 0)
            close(c->l[i].mem_fd);
        free(c->l[i].state_buf);
        c->l[i].state_buf = NULL;
    }
    c->n = 0;
    free(c->base_mem);
    c->base_mem = NULL;
    if (c->base_fd >= 0)
        close(c->base_fd);
    if (c->root_fd >= 0)
        close(c->root_fd);
    c->base_fd = c->root_fd = -1;
    free(c->root);
    c->root = NULL;
}

/* ---- the snapshot.c side ---- */

int snapdiff_precheck(struct moat_vm *vm, const char *state_path, const char *mem_path)
{
    struct snapvm *sv = snapvm_of(vm);
    if (!sv->dirty_log)
        return -ENOTSUP;
    if (vm->ram_size > SNAP_DIFF_MAX_MEM)
        return -EFBIG;
    const struct snapdiff_last *l = sv->last_snap;
    if (!l)
        return -ENODATA;
    if (l->depth + 1 > SNAP_DIFF_MAX_DEPTH)
        return -EMLINK;
    if (snapdiff_same_file(state_path, l->state_path) || snapdiff_same_file(state_path, l->mem_path) ||
        snapdiff_same_file(mem_path, l->state_path) || snapdiff_same_file(mem_path, l->mem_path))
        return -EEXIST;
    return 0;
}

int snapdiff_sections(struct moat_vm *vm, struct snap_writer *w, bool diff, uint64_t **bm)
{
    struct snapvm *sv = snapvm_of(vm);
    *bm = NULL;
    if (!sv->dirty_log)
        return diff ? -ENOTSUP : 0;
    int r = snapdiff_collect(vm, bm);
    if (r < 0 || !diff)
        return r;
    const struct snapdiff_last *l = sv->last_snap;
    size_t cap = sizeof(struct snap_parent) + 2 * SNAP_PARENT_PATH_MAX;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return -ENOMEM;
    long n = snap_parent_encode(buf, cap, l->checksum, l->depth + 1, l->state_path, l->mem_path);
    if (n < 0) {
        free(buf);
        return (int)n;
    }
    snapw_section(w, SNAP_DIFF_PARENT, 0, buf, (uint64_t)n);
    free(buf);
    snapw_section(w, SNAP_DIFF_PAGES, 0, *bm, snap_bitmap_words(vm->ram_size) * 8);
    return 0;
}

void snapdiff_done(struct moat_vm *vm, const char *state_path, const char *mem_path,
                   const uint8_t *state, size_t len, bool diff, const uint64_t *bm)
{
    struct snapvm *sv = snapvm_of(vm);
    uint32_t depth = diff && sv->last_snap ? sv->last_snap->depth + 1 : 0;
    (void)bm;   /* its bits left sv->dirty at collect */
    if (snapdiff_set_last(vm, state_path, mem_path, snap_file_checksum(state, len), depth) < 0) {
        /* Without a record of it, the next diff must not use the old parent. */
        log_warn("snapshot %s: cannot resolve its path; the next snapshot must be a full one", state_path);
        if (sv->last_snap) {
            free(sv->last_snap->state_path);
            free(sv->last_snap->mem_path);
            free(sv->last_snap);
            sv->last_snap = NULL;
        }
    }
}
