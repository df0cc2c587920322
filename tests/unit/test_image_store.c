/* The image store (vmm/image/store.c, refs.c, prune.c): blobs written,
 * verified, resumed, written once by concurrent writers; a killed writer's
 * tmp file never seen as a blob; references, names, rm and prune. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vmm/image/store.h"
#include "vmm/image/store_int.h"
#include "tests/unit/image_fixture.h"

static void put(const char *data, char digest[IMG_DIGEST_MAX])
{
    struct img_err err = { 0 };
    img_sha256(data, strlen(data), digest);
    ck_assert_int_eq(img_blob_put(&st, digest, data, strlen(data), &err), 0);
}

START_TEST(put_read_verify)
{
    char d[IMG_DIGEST_MAX], path[PATH_MAX];
    put("hello blob", d);
    uint64_t size = 0;
    ck_assert_int_eq(img_blob_has(&st, d, &size), 1);
    ck_assert_int_eq(size, 10);
    char *b;
    size_t len;
    struct img_err err = { 0 };
    ck_assert_int_eq(img_blob_read(&st, d, &b, &len, 100, &err), 0);
    ck_assert_int_eq(len, 10);
    ck_assert_str_eq(b, "hello blob");
    free(b);
    ck_assert_int_eq(img_blob_read(&st, d, &b, &len, 5, &err), -EFBIG);
    ck_assert_int_eq(img_blob_path(&st, d, path, sizeof path), 0);
    ck_assert_ptr_nonnull(strstr(path, "/images/blobs/sha256/"));
    ck_assert_int_eq(img_blob_path(&st, "sha256:abc", path, sizeof path), -EINVAL);
    /* Corrupted on disk: read refuses it. */
    FILE *f = fopen(path, "w");
    fputs("hellO blob", f);
    fclose(f);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_blob_read(&st, d, &b, &len, 100, &err), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(err.msg, "corrupt"));
    /* Putting again is a no-op: present. */
    ck_assert_int_eq(img_blob_put(&st, d, "hello blob", 10, &err), 0);
}
END_TEST

START_TEST(bad_digest_keeps_nothing)
{
    char d[IMG_DIGEST_MAX];
    img_sha256("right", 5, d);
    struct img_err err = { 0 };
    ck_assert_int_eq(img_blob_put(&st, d, "wrong", 5, &err), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(err.msg, "its content has digest"));
    ck_assert_int_eq(img_blob_has(&st, d, NULL), 0);
    memset(&err, 0, sizeof err);
    struct img_blob_w w;
    uint64_t have;
    ck_assert_int_eq(img_blob_begin(&st, d, &w, &have, &err), 0);
    ck_assert_int_eq(write(w.fd, "righ", 4), 4);
    ck_assert_int_eq(img_blob_commit(&st, &w, 5, &err), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(err.msg, "4 bytes, not the 5 expected"));
    ck_assert_int_eq(count_dir("tmp"), 0);
    ck_assert_int_eq(count_dir("blobs/sha256"), 0);
    ck_assert_int_eq(img_blob_put(&st, "sha256:nothex", "x", 1, &err), -EINVAL);
}
END_TEST

START_TEST(resume_and_killed_writer)
{
    const char *data = "0123456789abcdef";
    char d[IMG_DIGEST_MAX];
    img_sha256(data, 16, d);
    struct img_blob_w w;
    uint64_t have = 99;
    struct img_err err = { 0 };
    /* A writer killed after 6 bytes: a child writes and exits without commit. */
    pid_t pid = fork();
    if (pid == 0) {
        if (img_blob_begin(&st, d, &w, &have, &err) || write(w.fd, data, 6) != 6)
            _exit(1);
        _exit(0);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert_int_eq(img_blob_has(&st, d, NULL), 0);    /* not a blob */
    ck_assert_int_eq(img_blob_begin(&st, d, &w, &have, &err), 0);
    ck_assert_int_eq(have, 6);
    ck_assert_int_eq(write(w.fd, data + 6, 10), 10);   /* appends */
    ck_assert_int_eq(img_blob_commit(&st, &w, 16, &err), 0);
    ck_assert_int_eq(img_blob_has(&st, d, &have), 1);
    ck_assert_int_eq(have, 16);
    ck_assert_int_eq(img_blob_begin(&st, d, &w, &have, &err), 1);   /* present */
    /* abort(keep) keeps the partial data for a resume, abort(0) drops it. */
    char d2[IMG_DIGEST_MAX];
    img_sha256("xyz", 3, d2);
    ck_assert_int_eq(img_blob_begin(&st, d2, &w, &have, &err), 0);
    ck_assert_int_eq(write(w.fd, "xy", 2), 2);
    img_blob_abort(&st, &w, 1);
    ck_assert_int_eq(img_blob_begin(&st, d2, &w, &have, &err), 0);
    ck_assert_int_eq(have, 2);
    img_blob_abort(&st, &w, 0);
    ck_assert_int_eq(img_blob_begin(&st, d2, &w, &have, &err), 0);
    ck_assert_int_eq(have, 0);
    img_blob_abort(&st, &w, 0);
}
END_TEST

struct writer {
    const char *digest;
    int wrote;
};

static void *write_once(void *arg)
{
    struct writer *wr = arg;
    struct img_blob_w w;
    uint64_t have;
    struct img_err err = { 0 };
    int rc = img_blob_begin(&st, wr->digest, &w, &have, &err);
    if (rc == 0) {
        usleep(100000);     /* the other writer waits on the lock meanwhile */
        if (ftruncate(w.fd, 0) || pwrite(w.fd, "shared", 6, 0) != 6 ||
            img_blob_commit(&st, &w, 6, &err))
            return NULL;
        wr->wrote = 1;
    } else {
        wr->wrote = rc == 1 ? 0 : -1;
    }
    return NULL;
}

START_TEST(two_writers_write_once)
{
    char d[IMG_DIGEST_MAX];
    img_sha256("shared", 6, d);
    struct writer a = { d, -2 }, b = { d, -2 };
    pthread_t ta, tb;
    pthread_create(&ta, NULL, write_once, &a);
    pthread_create(&tb, NULL, write_once, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    ck_assert_int_eq(a.wrote + b.wrote, 1);     /* one wrote, the other found it */
    ck_assert_int_ge(a.wrote, 0);
    ck_assert_int_ge(b.wrote, 0);
    ck_assert_int_eq(img_blob_has(&st, d, NULL), 1);
}
END_TEST

START_TEST(two_processes_write_once)
{
    char d[IMG_DIGEST_MAX];
    img_sha256("shared", 6, d);
    pid_t p[2];
    for (int i = 0; i < 2; i++)
        if ((p[i] = fork()) == 0) {
            struct writer w = { d, -2 };
            write_once(&w);
            _exit(w.wrote == 1 ? 10 : w.wrote == 0 ? 20 : 30);
        }
    int s0, s1;
    waitpid(p[0], &s0, 0);
    waitpid(p[1], &s1, 0);
    ck_assert_int_eq(WEXITSTATUS(s0) + WEXITSTATUS(s1), 30);
}
END_TEST

/* An image of n layers "NAME-layer-K" stored; its manifest digest. */
static void make_image(const char *name, unsigned n, const char *shared_layer, char md[IMG_DIGEST_MAX])
{
    char layers[4096] = "", diffs[2048] = "", ld[IMG_DIGEST_MAX], cd[IMG_DIGEST_MAX];
    for (unsigned i = 0; i < n; i++) {
        char data[128];
        if (i == 0 && shared_layer)
            snprintf(data, sizeof data, "%s", shared_layer);
        else
            snprintf(data, sizeof data, "%s-layer-%u", name, i);
        put(data, ld);
        size_t l = strlen(layers), k = strlen(diffs);
        snprintf(layers + l, sizeof layers - l,
                 "%s{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\",\"size\":%zu}",
                 i ? "," : "", ld, strlen(data));
        snprintf(diffs + k, sizeof diffs - k, "%s\"%s\"", i ? "," : "", ld);
    }
    char cfg[4096], man[8192];
    snprintf(cfg, sizeof cfg, "{\"os\":\"linux\",\"architecture\":\"amd64\",\"created\":\"2026-01-02T03:04:05Z\","
             "\"config\":{\"Cmd\":[\"/bin/%s\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[%s]}}", name, diffs);
    put(cfg, cd);
    snprintf(man, sizeof man, "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
             "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\",\"size\":%zu},"
             "\"layers\":[%s]}", cd, strlen(cfg), layers);
    put(man, md);
}

static int count_cb(const struct img_ls_entry *e, void *arg)
{
    ck_assert_str_eq(e->error, "");
    ck_assert_int_gt(e->size, 0);
    ck_assert_str_eq(e->platform, "linux/amd64");
    (*(int *)arg)++;
    return 0;
}

START_TEST(refs_and_load)
{
    char m1[IMG_DIGEST_MAX], m2[IMG_DIGEST_MAX];
    struct img_err err = { 0 };
    make_image("one", 2, NULL, m1);
    make_image("two", 1, NULL, m2);
    ck_assert_int_eq(img_tag_set(&st, "one", m1, &err), 0);
    ck_assert_int_eq(img_tag_set(&st, "localhost:5000/team/two:v2", m2, &err), 0);
    ck_assert_int_eq(img_tag_set(&st, "Bad//ref", m2, &err), -EINVAL);
    ck_assert_int_eq(img_tag_set(&st, "x", "sha256:12", &err), -EINVAL);
    struct img_image im;
    const char *names1[] = { "one", "one:latest", "docker.io/library/one:latest",
                             "index.docker.io/library/one", m1, m1 + 7 };
    for (size_t i = 0; i < sizeof names1 / sizeof names1[0]; i++) {
        memset(&err, 0, sizeof err);
        ck_assert_msg(img_image_load(&st, names1[i], &im, &err) == 0, "%s: %s", names1[i], err.msg);
        ck_assert_str_eq(im.manifest_digest, m1);
        ck_assert_int_eq(im.manifest.nlayer, 2);
        ck_assert_str_eq(im.config.cmd[0], "/bin/one");
        img_image_free(&im);
    }
    char prefix[20];
    snprintf(prefix, sizeof prefix, "%.12s", m2 + 7);
    ck_assert_int_eq(img_image_load(&st, prefix, &im, &err), 0);
    ck_assert_str_eq(im.ref, "");   /* by digest, not a name */
    img_image_free(&im);
    ck_assert_int_eq(img_image_load(&st, "localhost:5000/team/two:v2", &im, &err), 0);
    ck_assert_str_eq(im.ref, "localhost:5000/team/two:v2");
    img_image_free(&im);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_image_load(&st, "three", &im, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, "no image"));
    /* Retag moves the reference. */
    ck_assert_int_eq(img_tag_set(&st, "one", m2, &err), 0);
    ck_assert_int_eq(img_image_load(&st, "one", &im, &err), 0);
    ck_assert_str_eq(im.manifest_digest, m2);
    img_image_free(&im);
    int n = 0;
    ck_assert_int_eq(img_store_list(&st, count_cb, &n, &err), 2);
    ck_assert_int_eq(n, 2);
}
END_TEST

START_TEST(ambiguous_prefix)
{
    char m[3][IMG_DIGEST_MAX];
    struct img_err err = { 0 };
    const char *names[] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++) {
        make_image(names[i], 1, NULL, m[i]);
        ck_assert_int_eq(img_tag_set(&st, names[i], m[i], &err), 0);
    }
    /* One hex digit is shared by some pair of 3 digests' first digits
     * only by chance; the empty-ish "sha256:" prefix matches all. */
    struct img_image im;
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_image_load(&st, "sha256:", &im, &err), -ENOENT);
    char d1[2] = { m[0][7], 0 };
    int same = m[1][7] == d1[0] || m[2][7] == d1[0];
    int rc = img_image_load(&st, d1, &im, &err);
    ck_assert_int_eq(rc, same ? -EINVAL : 0);
    if (!rc)
        img_image_free(&im);
}
END_TEST

START_TEST(rm_and_prune_keep_shared)
{
    char m1[IMG_DIGEST_MAX], m2[IMG_DIGEST_MAX];
    struct img_err err = { 0 };
    make_image("keep", 2, "shared-base", m1);
    make_image("drop", 2, "shared-base", m2);
    ck_assert_int_eq(img_tag_set(&st, "keep", m1, &err), 0);
    ck_assert_int_eq(img_tag_set(&st, "drop", m2, &err), 0);
    ck_assert_int_eq(img_tag_set(&st, "drop:again", m2, &err), 0);
    /* 2 manifests + 2 configs + shared + 2 own layers */
    ck_assert_int_eq(count_dir("blobs/sha256"), 7);
    ck_assert_int_eq(img_image_rm(&st, "drop", &err), 1);
    struct img_prune_result r;
    ck_assert_int_eq(img_store_prune(&st, 0, &r, &err), 0);
    ck_assert_int_eq(r.blobs, 0);   /* drop:again still holds it */
    /* by digest: every reference to it */
    ck_assert_int_eq(img_image_rm(&st, m2, &err), 1);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_image_rm(&st, "drop:again", &err), -ENOENT);
    /* a stale tmp file, a rootfs of the dropped config, one of the kept */
    struct img_image keep;
    ck_assert_int_eq(img_image_load(&st, "keep", &keep, &err), 0);
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/images/tmp/%064d", home, 7);
    close(open(p, O_CREAT | O_WRONLY, 0600));
    snprintf(p, sizeof p, "%s/images/rootfs/%s.ext4", home, keep.config_digest + 7);
    close(open(p, O_CREAT | O_WRONLY, 0600));
    snprintf(p, sizeof p, "%s/images/rootfs/%064d.ext4", home, 5);
    close(open(p, O_CREAT | O_WRONLY, 0600));
    /* a killed build's temporary of the kept image: goes (nobody holds its
     * lock); one whose builder holds the lock stays */
    snprintf(p, sizeof p, "%s/images/rootfs/%.64s.ext4.tmp.AbC123", home, keep.manifest_digest + 7);
    close(open(p, O_CREAT | O_WRONLY, 0600));
    snprintf(p, sizeof p, "%s/images/rootfs/%.64s.1048576.ext4.tmp.XyZ789", home, keep.manifest_digest + 7);
    close(open(p, O_CREAT | O_WRONLY, 0600));
    char key[160], kd[IMG_DIGEST_MAX], lock[PATH_MAX];
    snprintf(key, sizeof key, "moat rootfs %.64s.1048576.ext4", keep.manifest_digest + 7);
    img_sha256(key, strlen(key), kd);
    snprintf(lock, sizeof lock, "%s/images/locks/%.64s.lock", home, kd + 7);
    int builder = open(lock, O_CREAT | O_RDWR, 0600);
    ck_assert_int_ge(builder, 0);
    ck_assert_int_eq(flock(builder, LOCK_EX), 0);
    img_image_free(&keep);
    /* grace: nothing this recent goes */
    ck_assert_int_eq(img_store_prune(&st, 3600, &r, &err), 0);
    ck_assert_int_eq(r.blobs + r.rootfs + r.tmp, 0);
    ck_assert_int_eq(img_store_prune(&st, 0, &r, &err), 0);
    ck_assert_int_eq(r.blobs, 3);   /* drop's manifest, config, own layer */
    ck_assert_int_eq(r.rootfs, 2);   /* the dropped config's, the killed build's */
    ck_assert_int_eq(r.tmp, 1);
    ck_assert_int_eq(count_dir("blobs/sha256"), 4);
    ck_assert_int_eq(count_dir("rootfs"), 2);   /* the kept one's, the build in progress */
    close(builder);
    struct img_image im;
    ck_assert_int_eq(img_image_load(&st, "keep", &im, &err), 0);
    img_image_free(&im);
}
END_TEST

START_TEST(prune_spares_a_writer_in_progress)
{
    char d[IMG_DIGEST_MAX];
    img_sha256("in flight", 9, d);
    struct img_blob_w w;
    uint64_t have;
    struct img_err err = { 0 };
    ck_assert_int_eq(img_blob_begin(&st, d, &w, &have, &err), 0);
    ck_assert_int_eq(write(w.fd, "in ", 3), 3);
    struct img_prune_result r;
    ck_assert_int_eq(img_store_prune(&st, 0, &r, &err), 0);
    ck_assert_int_eq(r.tmp, 0);
    ck_assert_int_eq(write(w.fd, "flight", 6), 6);
    ck_assert_int_eq(img_blob_commit(&st, &w, 9, &err), 0);
    ck_assert_int_eq(img_blob_has(&st, d, NULL), 1);
}
END_TEST

START_TEST(corrupt_refs_file)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/images/refs/index", home);
    FILE *f = fopen(p, "w");
    fputs("sha256:zz docker.io/library/x:latest\n", f);
    fclose(f);
    struct img_err err = { 0 };
    struct img_image im;
    ck_assert_int_eq(img_image_load(&st, "x", &im, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad digest"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_store");
    TCase *tc = tcase_create("store");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, put_read_verify);
    tcase_add_test(tc, bad_digest_keeps_nothing);
    tcase_add_test(tc, resume_and_killed_writer);
    tcase_add_test(tc, two_writers_write_once);
    tcase_add_test(tc, two_processes_write_once);
    tcase_add_test(tc, refs_and_load);
    tcase_add_test(tc, ambiguous_prefix);
    tcase_add_test(tc, rm_and_prune_keep_shared);
    tcase_add_test(tc, prune_spares_a_writer_in_progress);
    tcase_add_test(tc, corrupt_refs_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
