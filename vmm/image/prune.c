/* img_store_prune (vmm/image/store.h): what no reference reaches goes. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vmm/image/store.h"
#include "vmm/image/store_int.h"

#define RM_MAX_DEPTH 64

struct reach {
    char (*d)[IMG_DIGEST_MAX];
    size_t n, cap;
    struct stat *keep;      /* files kept whatever reaches them */
    size_t nkeep;
};

static int kept(const struct reach *r, const struct stat *st)
{
    for (size_t i = 0; i < r->nkeep; i++)
        if (r->keep[i].st_dev == st->st_dev && r->keep[i].st_ino == st->st_ino)
            return 1;
    return 0;
}

static int reach_add(struct reach *r, const char *digest)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        void *p = realloc(r->d, cap * sizeof *r->d);
        if (!p)
            return -ENOMEM;
        r->d = p;
        r->cap = cap;
    }
    snprintf(r->d[r->n++], IMG_DIGEST_MAX, "%s", digest);
    return 0;
}

static int cmp_digest(const void *a, const void *b) { return strcmp(a, b); }

static int reached(const struct reach *r, const char *hex)
{
    char d[IMG_DIGEST_MAX];
    snprintf(d, sizeof d, "sha256:%.64s", hex);
    return r->n && bsearch(d, r->d, r->n, sizeof *r->d, cmp_digest) != NULL;
}

/* Every blob a reference reaches. An unreadable image stops the prune:
 * what it reaches is unknown. */
static int reach_all(const struct img_store *s, struct reach *r, struct img_err *err)
{
    struct img_refent *v;
    size_t n;
    int rc = img_refs_read(s, &v, &n, err);
    for (size_t i = 0; !rc && i < n; i++) {
        struct img_manifest *m = malloc(sizeof *m);
        char md[IMG_DIGEST_MAX];
        strcpy(md, v[i].digest);
        if (!m) {
            rc = img_err(err, -ENOMEM, "out of memory");
            break;
        }
        rc = reach_add(r, md);
        if (!rc && (rc = img_manifest_load(s, md, m, err)))
            img_err(err, rc, "not pruning: image %s cannot be read (moat image rm %s removes it)",
                    v[i].ref, v[i].ref);
        if (!rc)
            rc = reach_add(r, md);
        if (!rc)
            rc = reach_add(r, m->config.digest);
        for (unsigned k = 0; !rc && k < m->nlayer; k++)
            rc = reach_add(r, m->layer[k].digest);
        free(m);
    }
    free(v);
    if (rc == -ENOMEM)
        img_err(err, rc, "out of memory");
    if (!rc && r->n)
        qsort(r->d, r->n, sizeof *r->d, cmp_digest);
    return rc;
}

int img_rm_tree_at(int dfd, const char *name, int depth)
{
    if (!unlinkat(dfd, name, 0) || errno == ENOENT)
        return 0;
    if ((errno != EISDIR && errno != EPERM) || depth > RM_MAX_DEPTH)
        return -errno;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = -errno;
        if (fd >= 0)
            close(fd);
        return e;
    }
    int rc = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            rc = img_rm_tree_at(fd, e->d_name, depth + 1) ? -EIO : rc;
    closedir(d);
    if (!rc && unlinkat(dfd, name, AT_REMOVEDIR))
        rc = -errno;
    return rc;
}

static int hex64(const char *n, int exact)
{
    for (int i = 0; i < 64; i++)
        if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f')))
            return 0;
    return exact ? n[64] == '\0' : (n[64] == '\0' || n[64] == '.');
}

enum walk { W_BLOBS, W_ROOTFS, W_TMP, W_LOCKS };

/* May entry e of dir (kind w) go? Returns 1 with *lockfd held (or -1)
 * if so. */
static int may_go(const struct img_store *s, enum walk w, int dfd, const char *name,
                  const struct reach *r, unsigned grace_s, int *lockfd)
{
    struct stat st;
    *lockfd = -1;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) || st.st_mtime + (time_t)grace_s > time(NULL))
        return 0;
    if (w == W_BLOBS)
        return hex64(name, 1) && !reached(r, name) && !kept(r, &st);
    if (w == W_ROOTFS) {
        const char *tmp = strstr(name, ".tmp.");
        if (!hex64(name, 0))
            return 0;
        if (!tmp)
            return !reached(r, name) && !kept(r, &st);
        /* A build's temporary (rootfs_cache.c: "NAME.tmp.XXXXXX"), left by
         * a build that was killed, reached or not: it goes unless its
         * builder holds the lock of NAME (locks/SHA256("moat rootfs NAME")). */
        char key[160], d[IMG_DIGEST_MAX], lock[128];
        snprintf(key, sizeof key, "moat rootfs %.*s", (int)(tmp - name), name);
        img_sha256(key, strlen(key), d);
        if (img_store_rel(lock, sizeof lock, "locks", d, ".lock") < 0)
            return 0;
        *lockfd = img_store_lock(s, lock, 1);
        return *lockfd >= 0;
    }
    char lock[128];
    if (w == W_LOCKS || hex64(name, 1)) {   /* a blob being written: its lock */
        snprintf(lock, sizeof lock, "locks/%.64s.lock", name);
        *lockfd = img_store_lock(s, lock, 1);
        return *lockfd >= 0;
    }
    *lockfd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);   /* an import's folder */
    if (*lockfd >= 0 && !flock(*lockfd, LOCK_EX | LOCK_NB))
        return 1;
    if (*lockfd >= 0)
        close(*lockfd);
    *lockfd = -1;
    return 0;
}

static int walk(const struct img_store *s, enum walk w, const struct reach *r, unsigned grace_s,
                struct img_prune_result *res, struct img_err *err)
{
    static const char *const dirs[] = { "blobs/sha256", "rootfs", "tmp", "locks" };
    int fd = openat(s->dfd, dirs[w], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return errno == ENOENT ? 0 : img_err(err, -errno, "cannot read %s/%s: %s", s->root, dirs[w], strerror(errno));
    }
    int rc = 0, lk;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !may_go(s, w, fd, e->d_name, r, grace_s, &lk))
            continue;
        struct stat st = { 0 };
        uint64_t sz = fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) ? 0 : (uint64_t)st.st_size;
        if (img_rm_tree_at(fd, e->d_name, 0)) {
            rc = img_err(err, -errno, "cannot remove %s/%s/%s: %s", s->root, dirs[w], e->d_name, strerror(errno));
        } else if (w != W_LOCKS) {
            res->bytes += S_ISREG(st.st_mode) ? sz : 0;
            unsigned *count = w == W_BLOBS ? &res->blobs : w == W_ROOTFS ? &res->rootfs : &res->tmp;
            (*count)++;
        }
        if (lk >= 0)
            close(lk);
    }
    closedir(d);
    return rc;
}

int img_store_prune(struct img_store *s, unsigned grace_s, struct img_prune_result *res,
                    struct img_err *err)
{
    return img_store_prune_keep(s, grace_s, NULL, 0, res, err);
}

int img_store_prune_keep(struct img_store *s, unsigned grace_s, const char *const *keep, size_t nkeep,
                         struct img_prune_result *res, struct img_err *err)
{
    memset(res, 0, sizeof *res);
    struct reach r = { 0 };
    if (nkeep && !(r.keep = calloc(nkeep, sizeof *r.keep)))
        return img_err(err, -ENOMEM, "out of memory");
    for (size_t i = 0; i < nkeep; i++)
        if (!stat(keep[i], &r.keep[r.nkeep]))
            r.nkeep++;
    int lk = img_store_lock(s, "refs/lock", 0);
    if (lk < 0) {
        free(r.keep);
        return img_err(err, lk, "cannot lock %s/refs/lock: %s", s->root, strerror(-lk));
    }
    int rc = reach_all(s, &r, err);
    for (int w = W_BLOBS; !rc && w <= W_LOCKS; w++)
        rc = walk(s, (enum walk)w, &r, grace_s, res, err);
    free(r.d);
    free(r.keep);
    close(lk);
    return rc;
}
