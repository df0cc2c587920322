/* Image archives (vmm/image/tar.c, layout.c, export.c): tar headers, pax
 * records and member names, malformed ones refused; imports of hand-made
 * docker save folders and OCI layouts, every bad blob refused with nothing
 * kept; a tar import of an export. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/image/layout.h"
#include "vmm/image/store_int.h"
#include "vmm/image/tar.h"
#include "tests/unit/image_fixture.h"

static void hdr(uint8_t h[TAR_BLOCK], const char *name, const char *size, char type)
{
    memset(h, 0, TAR_BLOCK);
    memcpy(h, name, strlen(name));
    memcpy(h + 100, "0000644", 8);
    memcpy(h + 124, size, strlen(size));
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

START_TEST(tar_headers)
{
    uint8_t h[TAR_BLOCK];
    struct tar_ent e;
    struct img_err err = { 0 };
    hdr(h, "a/b.txt", "00000000012", '0');
    ck_assert_int_eq(tar_hdr_parse(h, &e, &err), 0);
    ck_assert_str_eq(e.name, "a/b.txt");
    ck_assert_int_eq(e.size, 10);
    ck_assert_int_eq(e.type, TAR_FILE);
    hdr(h, "l", "00000000012", '2');
    ck_assert_int_eq(tar_hdr_parse(h, &e, &err), 0);
    ck_assert_int_eq(e.size, 0);    /* a link has no data */
    memset(h, 0, sizeof h);
    ck_assert_int_eq(tar_hdr_parse(h, &e, &err), 1);
    hdr(h, "x", "00000000012", '0');
    h[0] = 'y';                     /* checksum now wrong */
    ck_assert_int_eq(tar_hdr_parse(h, &e, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad checksum"));
    memset(&err, 0, sizeof err);
    hdr(h, "x", "0000000001x", '0');
    ck_assert_int_eq(tar_hdr_parse(h, &e, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad size"));
    /* base-256 size */
    hdr(h, "big", "", '0');
    h[124] = 0x80;
    h[131] = 0x01;                  /* 1 << 32 */
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < TAR_BLOCK; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    ck_assert_int_eq(tar_hdr_parse(h, &e, &err), 0);
    ck_assert_int_eq(e.size, 1ull << 32);
}
END_TEST

START_TEST(tar_pax_and_names)
{
    struct tar_ent e = { 0 };
    struct img_err err = { 0 };
    const char *ok = "20 path=long/name/x\n11 size=99\n";
    ck_assert_int_eq(tar_pax_parse(ok, strlen(ok), &e, &err), 0);
    ck_assert_str_eq(e.name, "long/name/x");
    ck_assert_int_eq(e.size, 99);
    static const char *const bad[] = { "5 a=b", "x path=a\n", "99 path=a\n", "9 patha\n", "3 a\n",
                                       "30 size=12345678901234567890123\n" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        ck_assert_msg(tar_pax_parse(bad[i], strlen(bad[i]), &e, &err) == -EINVAL, "%s", bad[i]);
        ck_assert_ptr_nonnull(strstr(err.msg, "pax"));
    }
    char n1[] = "./a/b/", n2[] = "/etc/passwd", n3[] = "a/../../x", n4[] = "..", n5[] = "./", n6[] = "a/..b";
    ck_assert_int_eq(tar_name_clean(n1, &err), 0);
    ck_assert_str_eq(n1, "a/b");
    ck_assert_int_eq(tar_name_clean(n2, &err), -EINVAL);
    ck_assert_int_eq(tar_name_clean(n3, &err), -EINVAL);
    ck_assert_int_eq(tar_name_clean(n4, &err), -EINVAL);
    ck_assert_int_eq(tar_name_clean(n5, &err), 1);
    ck_assert_int_eq(tar_name_clean(n6, &err), 0);
}
END_TEST

static void file(const char *rel, const char *data)
{
    char p[600], cmd[700];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", p);
    ck_assert_int_eq(system(cmd), 0);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(data, f);
    fclose(f);
}

static int blobs(void)
{
    return count_dir("blobs/sha256");
}

/* A docker save folder D/: one plain-tar "layer" whose diff_id is given. */
static void docker_dir(const char *layer, const char *diff_id, const char *tags)
{
    char cfg[600], man[600], d[IMG_DIGEST_MAX];
    img_sha256(layer, strlen(layer), d);
    snprintf(cfg, sizeof cfg, "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"Cmd\":[\"/x\"]},"
             "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"%s\"]}}", diff_id ? diff_id : d);
    file("D/cfg.json", cfg);
    file("D/l1/layer.tar", layer);
    snprintf(man, sizeof man, "[{\"Config\":\"cfg.json\",\"RepoTags\":%s,\"Layers\":[\"l1/layer.tar\"]}]", tags);
    file("D/manifest.json", man);
}

static void count_cb(const char *ref, const char *digest, void *arg)
{
    ck_assert(img_digest_valid(digest));
    ck_assert_ptr_nonnull(strchr(ref, '/'));
    (*(int *)arg)++;
}

START_TEST(docker_folder)
{
    char p[300], d[IMG_DIGEST_MAX];
    struct img_err err = { 0 };
    int n = 0;
    docker_dir("not really a tar", NULL, "[\"example/a:1\",\"example/a:2\"]");
    snprintf(p, sizeof p, "%s/D", dir);
    ck_assert_msg(img_import(&st, p, NULL, NULL, count_cb, &n, &err) == 1, "%s", err.msg);
    ck_assert_int_eq(n, 2);
    struct img_image im;
    ck_assert_int_eq(img_image_load(&st, "example/a:2", &im, &err), 0);
    img_sha256("not really a tar", 16, d);
    ck_assert_str_eq(im.manifest.layer[0].digest, d);
    ck_assert_str_eq(im.manifest.layer[0].media_type, "application/vnd.oci.image.layer.v1.tar");
    ck_assert_str_eq(im.config.cmd[0], "/x");
    img_image_free(&im);
    ck_assert_int_eq(blobs(), 3);
    /* export it and import the tar again under another name */
    char out[300];
    snprintf(out, sizeof out, "%s/out.tar", dir);
    ck_assert_int_eq(img_export(&st, "example/a:1", out, &err), 0);
    ck_assert_int_eq(img_import(&st, out, "localhost/again:1", NULL, NULL, NULL, &err), 1);
    ck_assert_int_eq(img_image_load(&st, "localhost/again:1", &im, &err), 0);
    img_image_free(&im);
    ck_assert_int_eq(blobs(), 3);
}
END_TEST

START_TEST(docker_folder_refused)
{
    static const struct { const char *diff, *tags, *why; } c[] = {
        { "sha256:1111111111111111111111111111111111111111111111111111111111111111", "[\"x/y:1\"]",
          "is corrupt" },
        { NULL, "[]", "give --tag" },
        { NULL, "[\"y\"]", "only by the tag" },
        { NULL, "[\"Bad/Name:1\"]", "lowercase" },
    };
    char p[300];
    snprintf(p, sizeof p, "%s/D", dir);
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct img_err err = { 0 };
        docker_dir("layer", c[i].diff, c[i].tags);
        ck_assert_int_lt(img_import(&st, p, NULL, NULL, NULL, NULL, &err), 0);
        ck_assert_msg(strstr(err.msg, c[i].why), "%zu: %s", i, err.msg);
        ck_assert_int_eq(blobs(), 0);
    }
    struct img_err err = { 0 };
    file("D/manifest.json", "[{\"Config\":\"../etc/passwd\",\"Layers\":[\"a\"]}]");
    ck_assert_int_eq(img_import(&st, p, "x/y:1", NULL, NULL, NULL, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a path inside the archive"));
    memset(&err, 0, sizeof err);
    snprintf(p, sizeof p, "%s", dir);
    ck_assert_int_eq(img_import(&st, p, NULL, NULL, NULL, NULL, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "neither an OCI image layout"));
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_import(&st, p, "Not A Ref", NULL, NULL, NULL, &err), -EINVAL);
}
END_TEST

/* An OCI layout L/ of one image: layer "L1", config, manifest. */
static void oci_dir(const char *index_extra)
{
    char l[IMG_DIGEST_MAX], c[IMG_DIGEST_MAX], m[IMG_DIGEST_MAX], cfg[600], man[900], rel[200], idx[900];
    const char *layer = "L1";
    img_sha256(layer, 2, l);
    snprintf(cfg, sizeof cfg, "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"layers\","
             "\"diff_ids\":[\"%s\"]}}", l);
    img_sha256(cfg, strlen(cfg), c);
    snprintf(man, sizeof man, "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\","
             "\"digest\":\"%s\",\"size\":%zu},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\","
             "\"digest\":\"%s\",\"size\":2}]}", c, strlen(cfg), l);
    img_sha256(man, strlen(man), m);
    snprintf(rel, sizeof rel, "L/blobs/sha256/%s", l + 7);
    file(rel, layer);
    snprintf(rel, sizeof rel, "L/blobs/sha256/%s", c + 7);
    file(rel, cfg);
    snprintf(rel, sizeof rel, "L/blobs/sha256/%s", m + 7);
    file(rel, man);
    file("L/oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}");
    snprintf(idx, sizeof idx, "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
             "\"digest\":\"%s\",\"size\":%zu%s}]}", m, strlen(man), index_extra);
    file("L/index.json", idx);
}

START_TEST(oci_folder)
{
    char p[300], cmd[1400];
    struct img_err err = { 0 };
    snprintf(p, sizeof p, "%s/L", dir);
    oci_dir(",\"annotations\":{\"io.containerd.image.name\":\"docker.io/library/app:v3\"}");
    ck_assert_msg(img_import(&st, p, NULL, NULL, NULL, NULL, &err) == 1, "%s", err.msg);
    struct img_image im;
    ck_assert_int_eq(img_image_load(&st, "app:v3", &im, &err), 0);
    img_image_free(&im);
    ck_assert_int_eq(blobs(), 3);
    /* the same layout as a tar, and a tar with a member outside it */
    snprintf(cmd, sizeof cmd, "tar cf '%s/L.tar' -C '%s' . && tar cf '%s/evil.tar' -P '%s/oci-layout' "
             "--transform 's,.*,../../evil,'", dir, p, dir, p);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(p, sizeof p, "%s/L.tar", dir);
    ck_assert_int_eq(img_import(&st, p, "localhost/t:1", NULL, NULL, NULL, &err), 1);
    snprintf(p, sizeof p, "%s/evil.tar", dir);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_import(&st, p, "localhost/t:2", NULL, NULL, NULL, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "reaches outside the archive"));
}
END_TEST

START_TEST(oci_folder_refused)
{
    char p[300], cmd[1400];
    snprintf(p, sizeof p, "%s/L", dir);
    /* a wrong size in index.json */
    oci_dir("");
    struct img_err err = { 0 };
    snprintf(cmd, sizeof cmd, "sed -i 's/\"size\":\\([0-9]*\\)}]/\"size\":1}]/' '%s/index.json'", p);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_lt(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "its descriptor says 1"), "%s", err.msg);
    ck_assert_int_eq(blobs(), 0);
    /* a missing layer */
    oci_dir("");
    char l[IMG_DIGEST_MAX], rel[500];
    img_sha256("L1", 2, l);
    snprintf(rel, sizeof rel, "%s/blobs/sha256/%s", p, l + 7);
    ck_assert_int_eq(unlink(rel), 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_lt(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "No such file"));
    ck_assert_int_eq(blobs(), 0);
    /* a layer that is a link to a device, or to any file out of the
     * folder: refused, not read (for ever: /dev/zero) */
    ck_assert_int_eq(symlink("/dev/zero", rel), 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_lt(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "out of the folder"), "%s", err.msg);
    ck_assert_int_eq(blobs(), 0);
    ck_assert_int_eq(unlink(rel), 0);
    ck_assert_int_eq(symlink("../../../L/blobs/../index.json", rel), 0);   /* ".." past the folder */
    memset(&err, 0, sizeof err);
    ck_assert_int_lt(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "out of the folder"), "%s", err.msg);
    ck_assert_int_eq(blobs(), 0);
    ck_assert_int_eq(unlink(rel), 0);
    /* a link inside the folder to a device node there: not a file */
    char dev[520];
    snprintf(dev, sizeof dev, "%s/zero", p);
    ck_assert_int_eq(mkfifo(dev, 0600), 0);
    ck_assert_int_eq(symlink("../../zero", rel), 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_lt(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "is not a file"), "%s", err.msg);
    ck_assert_int_eq(blobs(), 0);
    ck_assert_int_eq(unlink(rel), 0);
    ck_assert_int_eq(unlink(dev), 0);
    /* a FIFO: refused, not waited on */
    ck_assert_int_eq(mkfifo(rel, 0600), 0);
    memset(&err, 0, sizeof err);
    ck_assert_int_lt(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 0);
    ck_assert_msg(strstr(err.msg, "is not a file"), "%s", err.msg);
    ck_assert_int_eq(unlink(rel), 0);
    /* a wrong-content layer */
    file(rel + strlen(dir) + 1, "L2");
    memset(&err, 0, sizeof err);
    ck_assert_int_lt(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "is corrupt"));
    ck_assert_int_eq(blobs(), 0);
    /* no image named */
    oci_dir("");
    memset(&err, 0, sizeof err);
    ck_assert_int_lt(img_import(&st, p, NULL, NULL, NULL, NULL, &err), 0);
    ck_assert_ptr_nonnull(strstr(err.msg, "no name"));
    /* export into a folder that holds a layout */
    ck_assert_int_eq(img_import(&st, p, "localhost/x:1", NULL, NULL, NULL, &err), 1);
    memset(&err, 0, sizeof err);
    ck_assert_int_eq(img_export(&st, "localhost/x:1", p, &err), -EEXIST);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_layout");
    TCase *tc = tcase_create("tar");
    tcase_add_test(tc, tar_headers);
    tcase_add_test(tc, tar_pax_and_names);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("layout");
    tcase_add_checked_fixture(tl, setup, teardown);
    tcase_add_test(tl, docker_folder);
    tcase_add_test(tl, docker_folder_refused);
    tcase_add_test(tl, oci_folder);
    tcase_add_test(tl, oci_folder_refused);
    suite_add_tcase(s, tl);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
