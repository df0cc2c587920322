/* OCI / Docker image JSON (vmm/image/manifest.c): indexes and platform
 * picking, manifests, configs, and every malformed case refused with why. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/image/manifest.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"
#define OCI_M "application/vnd.oci.image.manifest.v1+json"
#define OCI_I "application/vnd.oci.image.index.v1+json"
#define OCI_C "application/vnd.oci.image.config.v1+json"
#define OCI_L "application/vnd.oci.image.layer.v1.tar+gzip"
#define CFG "{\"mediaType\":\"" OCI_C "\",\"digest\":\"" D1 "\",\"size\":10}"
#define LAYER "{\"mediaType\":\"" OCI_L "\",\"digest\":\"" D2 "\",\"size\":20}"

static int man(const char *json, struct img_manifest *m, struct img_err *err)
{
    memset(err, 0, sizeof *err);
    return img_manifest_parse(json, strlen(json), m, err);
}

START_TEST(media_kinds)
{
    enum img_comp c;
    ck_assert_int_eq(img_media_kind(OCI_I, &c), IMG_K_INDEX);
    ck_assert_int_eq(img_media_kind("application/vnd.docker.distribution.manifest.list.v2+json", &c), IMG_K_INDEX);
    ck_assert_int_eq(img_media_kind("application/vnd.docker.distribution.manifest.v2+json; charset=utf-8", &c),
                     IMG_K_MANIFEST);
    ck_assert_int_eq(img_media_kind("application/vnd.docker.container.image.v1+json", &c), IMG_K_CONFIG);
    ck_assert_int_eq(img_media_kind("application/vnd.oci.image.layer.v1.tar+zstd", &c), IMG_K_LAYER);
    ck_assert_int_eq(c, IMG_COMP_ZSTD);
    ck_assert_int_eq(img_media_kind("application/vnd.docker.image.rootfs.diff.tar.gzip", &c), IMG_K_LAYER);
    ck_assert_int_eq(c, IMG_COMP_GZIP);
    ck_assert_int_eq(img_media_kind("application/vnd.oci.image.layer.v1.tar", &c), IMG_K_LAYER);
    ck_assert_int_eq(c, IMG_COMP_NONE);
    ck_assert_int_eq(img_media_kind("text/plain", &c), IMG_K_UNKNOWN);
    ck_assert_int_eq(img_media_kind(NULL, NULL), IMG_K_UNKNOWN);
    ck_assert_int_eq(img_media_kind("application/vnd.oci.image.layer.v1.tarx", NULL), IMG_K_UNKNOWN);
}
END_TEST

START_TEST(manifest_ok)
{
    struct img_manifest m;
    struct img_err err;
    const char *j = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_M "\",\"config\":" CFG ",\"layers\":[" LAYER ","
                    "{\"mediaType\":\"application/vnd.docker.image.rootfs.diff.tar.gzip\",\"digest\":\"" D3 "\",\"size\":0}],"
                    "\"annotations\":{\"a\":\"b\"}}";
    ck_assert_msg(man(j, &m, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(m.nlayer, 2);
    ck_assert_str_eq(m.config.digest, D1);
    ck_assert_int_eq(m.config.size, 10);
    ck_assert_int_eq(m.config.kind, IMG_K_CONFIG);
    ck_assert_int_eq(m.layer[0].comp, IMG_COMP_GZIP);
    ck_assert_str_eq(m.layer[1].digest, D3);
    /* mediaType may be absent (OCI) */
    ck_assert_int_eq(man("{\"schemaVersion\":2,\"config\":" CFG ",\"layers\":[" LAYER "]}", &m, &err), 0);
    ck_assert_int_eq(img_json_kind(j, strlen(j)), IMG_K_MANIFEST);
}
END_TEST

START_TEST(manifest_malformed)
{
    static const struct { const char *json, *why; } c[] = {
        { "", "not valid JSON" },
        { "{", "not valid JSON" },
        { "[]", "not a JSON object" },
        { "{\"schemaVersion\":2,\"schemaVersion\":2}", "not valid JSON" },
        { "{\"config\":" CFG ",\"layers\":[" LAYER "]}", "no schemaVersion" },
        { "{\"schemaVersion\":\"2\",\"config\":" CFG ",\"layers\":[" LAYER "]}", "not an integer" },
        { "{\"schemaVersion\":3,\"config\":" CFG ",\"layers\":[" LAYER "]}", "not 2" },
        { "{\"schemaVersion\":1,\"name\":\"x\",\"fsLayers\":[]}", "schema 1" },
        { "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.v1+prettyjws\"}", "schema 1" },
        { "{\"schemaVersion\":2,\"mediaType\":\"" OCI_I "\",\"config\":" CFG ",\"layers\":[" LAYER "]}", "not an image manifest" },
        { "{\"schemaVersion\":2,\"mediaType\":7,\"config\":" CFG ",\"layers\":[" LAYER "]}", "not a string" },
        { "{\"schemaVersion\":2,\"manifests\":[],\"config\":" CFG ",\"layers\":[" LAYER "]}", "is an index" },
        { "{\"schemaVersion\":2,\"layers\":[" LAYER "]}", "no \"config\"" },
        { "{\"schemaVersion\":2,\"config\":[],\"layers\":[" LAYER "]}", "not a JSON object" },
        { "{\"schemaVersion\":2,\"config\":{\"digest\":\"" D1 "\",\"size\":1},\"layers\":[" LAYER "]}", "no mediaType" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"size\":1},\"layers\":[" LAYER "]}", "no digest" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"" D1 "\"},\"layers\":[" LAYER "]}", "no size" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"sha256:12\",\"size\":1},\"layers\":[" LAYER "]}", "not sha256" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"md5:" "1111" "\",\"size\":1},\"layers\":[" LAYER "]}", "not sha256" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"" D1 "\",\"size\":-1},\"layers\":[" LAYER "]}", "size is not" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"" D1 "\",\"size\":\"1\"},\"layers\":[" LAYER "]}", "size is not" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"" D1 "\",\"size\":1.5},\"layers\":[" LAYER "]}", "size is not" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"" D1 "\",\"size\":99999999999999999},\"layers\":[" LAYER "]}", "size is not" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" OCI_C "\",\"digest\":\"" D1 "\",\"size\":5000000},\"layers\":[" LAYER "]}", "more than the limit" },
        { "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/vnd.cncf.helm.config.v1+json\",\"digest\":\"" D1 "\",\"size\":1},\"layers\":[" LAYER "]}", "not a container image config" },
        { "{\"schemaVersion\":2,\"config\":" CFG "}", "no \"layers\"" },
        { "{\"schemaVersion\":2,\"config\":" CFG ",\"layers\":{}}", "not an array" },
        { "{\"schemaVersion\":2,\"config\":" CFG ",\"layers\":[]}", "no layers" },
        { "{\"schemaVersion\":2,\"config\":" CFG ",\"layers\":[7]}", "not a JSON object" },
        { "{\"schemaVersion\":2,\"config\":" CFG ",\"layers\":[{\"mediaType\":\"text/plain\",\"digest\":\"" D2 "\",\"size\":1}]}", "not a layer" },
        { "{\"schemaVersion\":2,\"config\":" CFG ",\"layers\":[{\"mediaType\":\"" OCI_L "\",\"digest\":\"" D2 "\",\"size\":1,\"platform\":3}]}", "platform is not" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct img_manifest m;
        struct img_err err;
        ck_assert_msg(man(c[i].json, &m, &err) == -EINVAL, "case %zu parsed", i);
        ck_assert_msg(strstr(err.msg, c[i].why), "case %zu: %s", i, err.msg);
        ck_assert_int_eq(m.nlayer, 0);
    }
}
END_TEST

START_TEST(manifest_limits)
{
    size_t cap = 200 * (IMG_MAX_LAYERS + 2);
    char *j = malloc(cap);
    for (unsigned n = IMG_MAX_LAYERS; n <= IMG_MAX_LAYERS + 1; n++) {
        size_t k = (size_t)snprintf(j, cap, "{\"schemaVersion\":2,\"config\":" CFG ",\"layers\":[");
        for (unsigned i = 0; i < n; i++)
            k += (size_t)snprintf(j + k, cap - k, "%s" LAYER, i ? "," : "");
        snprintf(j + k, cap - k, "]}");
        struct img_manifest m;
        struct img_err err;
        ck_assert_int_eq(man(j, &m, &err), n <= IMG_MAX_LAYERS ? 0 : -EINVAL);
        if (n > IMG_MAX_LAYERS)
            ck_assert_ptr_nonnull(strstr(err.msg, "more than the limit"));
        else
            ck_assert_int_eq(m.nlayer, IMG_MAX_LAYERS);
    }
    free(j);
    /* a document over IMG_JSON_MAX is refused before parsing */
    struct img_manifest m;
    struct img_err err = { 0 };
    ck_assert_int_eq(img_manifest_parse("{}", IMG_JSON_MAX + 1, &m, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than the limit"));
}
END_TEST

#define ENTRY(dg, os, arch, extra) \
    "{\"mediaType\":\"" OCI_M "\",\"digest\":\"" dg "\",\"size\":100,\"platform\":{\"os\":\"" os \
    "\",\"architecture\":\"" arch "\"" extra "}}"

static int pick(const char *json, const char *plat, struct img_desc *d, struct img_err *err)
{
    memset(err, 0, sizeof *err);
    return img_index_pick(json, strlen(json), plat, d, err);
}

START_TEST(index_pick)
{
    const char *j = "{\"schemaVersion\":2,\"mediaType\":\"" OCI_I "\",\"manifests\":["
                    ENTRY(D1, "linux", "arm64", ",\"variant\":\"v8\"") ","
                    "{\"mediaType\":\"text/x-unknown\",\"digest\":\"" D3 "\",\"size\":1},"
                    ENTRY(D2, "linux", "amd64", "") ","
                    ENTRY(D3, "unknown", "unknown", "") "]}";
    struct img_desc d;
    struct img_err err;
    ck_assert_int_eq(pick(j, NULL, &d, &err), 0);
    ck_assert_str_eq(d.digest, D2);
    ck_assert_str_eq(d.arch, "amd64");
    ck_assert_int_eq(pick(j, "linux/arm64", &d, &err), 0);
    ck_assert_str_eq(d.digest, D1);
    ck_assert_int_eq(pick(j, "linux/aarch64/v8", &d, &err), 0);
    ck_assert_str_eq(d.variant, "v8");
    ck_assert_int_eq(pick(j, "linux/x86_64", &d, &err), 0);
    ck_assert_str_eq(d.digest, D2);
    ck_assert_int_eq(pick(j, "linux/arm64/v7", &d, &err), -ENOENT);
    ck_assert_int_eq(pick(j, "linux/s390x", &d, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, "no manifest for linux/s390x"));
    ck_assert_ptr_nonnull(strstr(err.msg, "linux/arm64/v8, linux/amd64"));
    ck_assert_ptr_null(strstr(err.msg, "unknown/"));
    ck_assert_int_eq(pick(j, "linux", &d, &err), -EINVAL);
    ck_assert_int_eq(img_json_kind(j, strlen(j)), IMG_K_INDEX);
    /* Docker's manifest list, no amd64 */
    const char *dl = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.list.v2+json\","
                     "\"manifests\":[" ENTRY(D1, "linux", "arm", ",\"variant\":\"v7\"") "]}";
    ck_assert_int_eq(pick(dl, NULL, &d, &err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err.msg, "the index has: linux/arm/v7"));
}
END_TEST

START_TEST(index_malformed)
{
    static const struct { const char *json, *why; } c[] = {
        { "nope", "not valid JSON" },
        { "{\"schemaVersion\":2}", "no \"manifests\"" },
        { "{\"schemaVersion\":2,\"layers\":[]}", "it is a manifest" },
        { "{\"schemaVersion\":2,\"manifests\":{}}", "not an array" },
        { "{\"schemaVersion\":1,\"manifests\":[]}", "schema 1" },
        { "{\"schemaVersion\":2,\"mediaType\":\"" OCI_M "\",\"manifests\":[]}", "not an index" },
        { "{\"schemaVersion\":2,\"manifests\":[3]}", "not a JSON object" },
        { "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_M "\",\"digest\":\"sha256:x\",\"size\":1}]}", "not sha256" },
        { "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_M "\",\"digest\":\"" D1 "\",\"size\":1,\"platform\":{\"os\":1}}]}", "not a string" },
        { "{\"schemaVersion\":2,\"manifests\":[" ENTRY(D1, "linux", "amd64", ",\"variant\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"") "]}", "longer than" },
        { "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"" OCI_I "\",\"digest\":\"" D1 "\",\"size\":1,"
          "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}", "nested indexes" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct img_desc d;
        struct img_err err;
        ck_assert_msg(pick(c[i].json, NULL, &d, &err) == -EINVAL, "case %zu", i);
        ck_assert_msg(strstr(err.msg, c[i].why), "case %zu: %s", i, err.msg);
    }
    /* too many entries */
    size_t cap = 1100 * 250;
    char *j = malloc(cap);
    size_t k = (size_t)snprintf(j, cap, "{\"schemaVersion\":2,\"manifests\":[");
    for (int i = 0; i < 1025; i++)
        k += (size_t)snprintf(j + k, cap - k, "%s" ENTRY(D1, "linux", "arm64", ""), i ? "," : "");
    snprintf(j + k, cap - k, "]}");
    struct img_desc d;
    struct img_err err;
    ck_assert_int_eq(pick(j, NULL, &d, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "1025 manifests"));
    free(j);
}
END_TEST

static int cfg(const char *json, struct img_config *c, struct img_err *err)
{
    memset(err, 0, sizeof *err);
    return img_config_parse(json, strlen(json), c, err);
}

START_TEST(config_ok)
{
    struct img_config c;
    struct img_err err;
    const char *j = "{\"os\":\"linux\",\"architecture\":\"amd64\",\"created\":\"2024-05-06T07:08:09.5Z\","
                    "\"config\":{\"Entrypoint\":[\"/bin/sh\",\"-c\"],\"Cmd\":[\"echo hi\"],"
                    "\"Env\":[\"PATH=/usr/bin\",\"A=\"],\"WorkingDir\":\"/app\",\"User\":\"1000:1000\",\"Labels\":null},"
                    "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D1 "\",\"" D2 "\"]},\"history\":[]}";
    ck_assert_msg(cfg(j, &c, &err) == 0, "%s", err.msg);
    ck_assert_str_eq(c.os, "linux");
    ck_assert_str_eq(c.arch, "amd64");
    ck_assert_str_eq(c.entrypoint[1], "-c");
    ck_assert_ptr_null(c.entrypoint[2]);
    ck_assert_str_eq(c.cmd[0], "echo hi");
    ck_assert_str_eq(c.env[1], "A=");
    ck_assert_str_eq(c.workdir, "/app");
    ck_assert_str_eq(c.user, "1000:1000");
    ck_assert_int_eq(c.ndiff, 2);
    ck_assert_str_eq(c.diff_ids[1], D2);
    ck_assert_str_eq(c.created, "2024-05-06T07:08:09.5Z");
    ck_assert_int_eq(img_json_kind(j, strlen(j)), IMG_K_CONFIG);
    img_config_free(&c);
    ck_assert_ptr_null(c.cmd);
    /* no config section, null Cmd: absent */
    ck_assert_int_eq(cfg("{\"os\":\"linux\",\"architecture\":\"arm64\",\"config\":{\"Cmd\":null},"
                         "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}", &c, &err), 0);
    ck_assert_ptr_null(c.cmd);
    ck_assert_ptr_null(c.workdir);
    ck_assert_int_eq(c.ndiff, 0);
    img_config_free(&c);
}
END_TEST

#define RF ",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}"
START_TEST(config_malformed)
{
    static const struct { const char *json, *why; } c[] = {
        { "[1]", "not a JSON object" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\"", "not valid JSON" },
        { "{\"architecture\":\"amd64\"" RF "}", "no \"os\"" },
        { "{\"os\":\"linux\"" RF "}", "no \"architecture\"" },
        { "{\"os\":5,\"architecture\":\"amd64\"" RF "}", "not a string" },
        { "{\"os\":\"linuxlinuxlinuxlinuxlinuxlinuxlinux\",\"architecture\":\"amd64\"" RF "}", "longer than" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":[]" RF "}", "not a JSON object" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"Cmd\":\"ls\"}" RF "}", "Cmd is not an array" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"Entrypoint\":[1]}" RF "}", "Entrypoint[0] is not a string" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"Env\":[\"NOVALUE\"]}" RF "}", "not NAME=VALUE" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"Env\":[\"=x\"]}" RF "}", "not NAME=VALUE" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"WorkingDir\":[]}" RF "}", "not a string" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{\"User\":0}" RF "}", "not a string" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\"}", "no \"rootfs\"" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":1}", "not a JSON object" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"x\",\"diff_ids\":[]}}", "not \"layers\"" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"layers\"}}", "diff_ids is missing" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":{}}}", "not an array" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:1\"]}}", "diff_ids[0]" },
        { "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"" D1 "\",2]}}", "not a string" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        struct img_config cf;
        struct img_err err;
        ck_assert_msg(cfg(c[i].json, &cf, &err) == -EINVAL, "case %zu parsed", i);
        ck_assert_msg(strstr(err.msg, c[i].why), "case %zu: %s", i, err.msg);
        ck_assert_ptr_null(cf.cmd);
        ck_assert_ptr_null(cf.diff_ids);
    }
    /* too many diff_ids */
    size_t cap = 80 * (IMG_MAX_LAYERS + 2) + 200;
    char *j = malloc(cap);
    size_t k = (size_t)snprintf(j, cap, "{\"os\":\"linux\",\"architecture\":\"amd64\",\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[");
    for (int i = 0; i <= IMG_MAX_LAYERS; i++)
        k += (size_t)snprintf(j + k, cap - k, "%s\"" D1 "\"", i ? "," : "");
    snprintf(j + k, cap - k, "]}}");
    struct img_config cf;
    struct img_err err;
    ck_assert_int_eq(cfg(j, &cf, &err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than the limit"));
    free(j);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("image_manifest");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, media_kinds);
    tcase_add_test(tc, manifest_ok);
    tcase_add_test(tc, manifest_malformed);
    tcase_add_test(tc, manifest_limits);
    tcase_add_test(tc, index_pick);
    tcase_add_test(tc, index_malformed);
    tcase_add_test(tc, config_ok);
    tcase_add_test(tc, config_malformed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
