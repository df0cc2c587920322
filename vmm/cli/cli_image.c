/* moat image: the image store (docs/images.md): pull (cli_image_pull.c),
 * ls, inspect, rm, prune, import, export. The options and the output; the work is vmm/image/'s. */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/cli/cli.h"
#include "vmm/cli/cli_image_rootfs.h"
#include "vmm/image/layout.h"
#include "vmm/image/store.h"
#include "vmm/sandbox/sandbox.h"

#define PRUNE_GRACE_S 300

/* Subcommands: name, usage line(s), handler (the store is open). */
struct image_sub {
    const char *name, *usage;
    int (*fn)(struct img_store *s, int argc, char **argv);
};
static int image_ls(struct img_store *s, int argc, char **argv);
static int image_inspect(struct img_store *s, int argc, char **argv);
static int image_rm(struct img_store *s, int argc, char **argv);
static int image_prune(struct img_store *s, int argc, char **argv);
static int image_import(struct img_store *s, int argc, char **argv);
static int image_export(struct img_store *s, int argc, char **argv);

static const struct image_sub subs[] = {
    { "pull", "pull [--platform OS/ARCH[/VARIANT]] [--creds USER:PASS] [--insecure]\n"
              "                  [--ca-cert FILE] [--quiet] REF", cmd_image_pull },
    { "ls", "ls [--json]", image_ls },
    { "inspect", "inspect NAME...", image_inspect },
    { "rm", "rm NAME...", image_rm },
    { "prune", "prune [--grace SECONDS]", image_prune },
    { "import", "import FILE|DIR [--tag REF] [--platform OS/ARCH[/VARIANT]]", image_import },
    { "export", "export NAME DIR|FILE.tar", image_export },
    { "rootfs", "rootfs NAME [--disk-size SIZE] [--out FILE]", image_rootfs },
};

static const char usage_tail[] =
    "\n"
    "Container images in $MOAT_HOME/images (docs/images.md). NAME: a reference\n"
    "(python:3.12, docker.io/library/python:3.12, host:5000/app:v1), or a\n"
    "manifest digest (sha256:HEX) or a unique start of one.\n"
    "  pull     download REF from its registry (moat image pull --help)\n"
    "  ls       the images: repository, tag, digest, size, created\n"
    "  inspect  the images as JSON: digests, sizes, layers, the config\n"
    "  rm       remove the reference (by digest: every reference to it); the\n"
    "           blobs stay until prune\n"
    "  prune    remove the blobs no reference reaches, their root filesystems,\n"
    "           and leftovers of interrupted writes; anything written in the\n"
    "           last --grace seconds (default 300) stays\n"
    "  import   an OCI image layout (folder or tar: skopeo copy ... oci:DIR,\n"
    "           umoci, buildah push oci:DIR) or a docker save archive (tar or\n"
    "           its folder); --tag: the name to give it (else the archive's)\n"
    "  export   an image as an OCI image layout: a folder, or a tar when the\n"
    "           path ends in .tar\n"
    "  rootfs   the image's layers as one ext4 root filesystem (cached in\n"
    "           rootfs/, read-only; its path printed), or a new file (--out)\n";

static void image_usage(FILE *f)
{
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        fprintf(f, "%s moat image %s\n", i ? "      " : "usage:", subs[i].usage);
    fputs(usage_tail, f);
}

static int usage_err(void)
{
    image_usage(stderr);
    return EXIT_USAGE;
}

/* err's lines as "moat: image SUB: LINE"; exit status 1. */
int image_fail(const char *sub, const struct img_err *e)
{
    for (const char *m = e->msg, *nl; *m; m = *nl ? nl + 1 : nl) {
        nl = strchrnul(m, '\n');
        fprintf(stderr, "moat: image %s: %.*s\n", sub, (int)(nl - m), m);
    }
    if (!e->msg[0])
        fprintf(stderr, "moat: image %s: failed (%s)\n", sub, strerror(-e->code));
    return 1;
}

/* "python" for docker.io/library/python, "user/app" for docker.io/user/app. */
static void short_repo(const struct img_ref *r, char *buf, size_t len)
{
    if (!strcmp(r->registry, "docker.io"))
        snprintf(buf, len, "%s", !strncmp(r->repo, "library/", 8) ? r->repo + 8 : r->repo);
    else
        snprintf(buf, len, "%s/%s", r->registry, r->repo);
}

static void human_size(uint64_t b, char *buf, size_t len)
{
    static const char *const unit[] = { "B", "kB", "MB", "GB", "TB" };
    double v = (double)b;
    int u = 0;
    while (v >= 1000 && u < 4)
        v /= 1000, u++;
    snprintf(buf, len, u ? "%.3g%s" : "%.0f%s", v, unit[u]);
}

struct ls_rows {
    struct img_ls_entry *v;
    size_t n, cap;
};

static int ls_collect(const struct img_ls_entry *e, void *arg)
{
    struct ls_rows *r = arg;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16;
        void *p = realloc(r->v, cap * sizeof *r->v);
        if (!p)
            return -ENOMEM;
        r->v = p;
        r->cap = cap;
    }
    r->v[r->n++] = *e;
    return 0;
}

static json_t *ls_json(const struct img_ls_entry *e)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s}", "reference", e->ref, "registry", e->parsed.registry,
                          "repository", e->parsed.repo, "tag", e->parsed.tag, "digest", e->manifest_digest);
    if (e->error[0]) {
        json_object_set_new(o, "error", json_string(e->error));
        return o;
    }
    json_object_set_new(o, "config_digest", json_string(e->config_digest));
    json_object_set_new(o, "size", json_integer((json_int_t)e->size));
    json_object_set_new(o, "layers", json_integer(e->nlayer));
    json_object_set_new(o, "platform", json_string(e->platform));
    json_object_set_new(o, "created", e->created[0] ? json_string(e->created) : json_null());
    return o;
}

static void ls_table(const struct ls_rows *r)
{
    int wr = 10, wt = 3;
    char repo[600], size[32];
    for (size_t i = 0; i < r->n; i++) {
        short_repo(&r->v[i].parsed, repo, sizeof repo);
        wr = (int)strlen(repo) > wr ? (int)strlen(repo) : wr;
        wt = (int)strlen(r->v[i].parsed.tag) > wt ? (int)strlen(r->v[i].parsed.tag) : wt;
    }
    printf("%-*s  %-*s  %-12s  %8s  %s\n", wr, "REPOSITORY", wt, "TAG", "DIGEST", "SIZE", "CREATED");
    for (size_t i = 0; i < r->n; i++) {
        const struct img_ls_entry *e = &r->v[i];
        short_repo(&e->parsed, repo, sizeof repo);
        human_size(e->size, size, sizeof size);
        char created[32];
        snprintf(created, sizeof created, "%.10s %.5s", e->created, e->created[0] ? e->created + 11 : "");
        printf("%-*s  %-*s  %.12s  %8s  %s\n", wr, repo, wt, e->parsed.tag[0] ? e->parsed.tag : "<none>",
               e->manifest_digest + 7, e->error[0] ? "-" : size,
               e->error[0] ? "(unreadable: moat image inspect says why)" : e->created[0] ? created : "-");
    }
}

static int image_ls(struct img_store *s, int argc, char **argv)
{
    bool json = argc == 2 && !strcmp(argv[1], "--json");
    if (argc > 2 || (argc == 2 && !json))
        return usage_err();
    struct ls_rows r = { 0 };
    struct img_err err = { 0 };
    int rc = img_store_list(s, ls_collect, &r, &err);
    if (rc < 0) {
        free(r.v);
        return image_fail("ls", &err);
    }
    if (json) {
        json_t *a = json_array();
        for (size_t i = 0; i < r.n; i++)
            json_array_append_new(a, ls_json(&r.v[i]));
        json_dumpf(a, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(a);
    } else {
        ls_table(&r);
    }
    free(r.v);
    return 0;
}

static json_t *str_array(char **v)
{
    if (!v)
        return json_null();
    json_t *a = json_array();
    for (; *v; v++)
        json_array_append_new(a, json_string(*v));
    return a;
}

static json_t *inspect_json(const struct img_store *s, const struct img_image *im)
{
    const struct img_config *c = &im->config;
    uint64_t msize = 0, total;
    img_blob_has(s, im->manifest_digest, &msize);
    total = msize + im->manifest.config.size;
    json_t *layers = json_array();
    for (unsigned i = 0; i < im->manifest.nlayer; i++) {
        const struct img_desc *d = &im->manifest.layer[i];
        total += d->size;
        json_array_append_new(layers, json_pack("{s:s, s:I, s:s, s:s}", "digest", d->digest, "size",
                                                (json_int_t)d->size, "media_type", d->media_type,
                                                "diff_id", c->diff_ids[i]));
    }
    json_t *cfg = json_pack("{s:s, s:I, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o}",
                            "digest", im->config_digest, "size", (json_int_t)im->manifest.config.size,
                            "os", c->os, "architecture", c->arch,
                            "created", c->created[0] ? json_string(c->created) : json_null(),
                            "entrypoint", str_array(c->entrypoint), "cmd", str_array(c->cmd),
                            "env", str_array(c->env),
                            "working_dir", c->workdir ? json_string(c->workdir) : json_null(),
                            "user", c->user ? json_string(c->user) : json_null());
    return json_pack("{s:o, s:s, s:s, s:I, s:I, s:o, s:o}",
                     "reference", im->ref[0] ? json_string(im->ref) : json_null(),
                     "digest", im->manifest_digest,
                     "media_type", im->manifest.media_type[0] ? im->manifest.media_type
                                                              : "application/vnd.oci.image.manifest.v1+json",
                     "manifest_size", (json_int_t)msize, "size", (json_int_t)total,
                     "config", cfg, "layers", layers);
}

static int image_inspect(struct img_store *s, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return usage_err();
    json_t *a = json_array();
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct img_image im;
        struct img_err err = { 0 };
        if (img_image_load(s, argv[i], &im, &err)) {
            rc = image_fail("inspect", &err);
            continue;
        }
        json_array_append_new(a, inspect_json(s, &im));
        img_image_free(&im);
    }
    json_dumpf(a, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(a);
    return rc;
}

static int image_rm(struct img_store *s, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return usage_err();
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct img_err err = { 0 };
        int n = img_image_rm(s, argv[i], &err);
        if (n < 0)
            rc = image_fail("rm", &err);
        else
            printf("removed %s (%d reference%s)\n", argv[i], n, n == 1 ? "" : "s");
    }
    return rc;
}

/* The absolute paths among sandbox sb's recorded run arguments (its
 * config's arg= lines: --image-config's blob among them) into v[*n..],
 * at most max. */
static void sandbox_arg_paths(const struct sbx *sb, char **v, size_t *n, size_t max)
{
    char p[PATH_MAX + 16], line[PATH_MAX + 8];
    snprintf(p, sizeof p, "%s/config", sb->dir);
    FILE *f = fopen(p, "re");
    while (f && *n < max && fgets(line, sizeof line, f))
        if (!strncmp(line, "arg=/", 5) && (v[*n] = strndup(line + 4, strcspn(line + 4, "\n"))))
            (*n)++;
    if (f)
        fclose(f);
}

/* Every sandbox's files: its drives' (a drive spec's path, up to its
 * first ',') and the paths among its run arguments. A sandbox made from
 * an image boots from the store's root file and config blob, which prune
 * must keep even once the image's reference is gone. A heap array of heap
 * strings into *out, *n; 0 or -1 after saying why. */
static int sandbox_drives(char ***out, size_t *n)
{
    struct sbx_info *info = NULL;
    size_t ns = 0;
    struct sbx_err e = { 0 };
    *out = NULL;
    *n = 0;
    if (sandbox_list("", &info, &ns, &e) < 0) {
        cli_say(&e);
        return -1;
    }
    enum { PER = MOAT_MAX_DRIVES + 16 };    /* drives, then argument paths */
    char **v = calloc(ns * PER + 1, sizeof *v);
    for (size_t i = 0; v && i < ns; i++) {
        int r;
        struct sbx *sb = sandbox_open_alloc(info[i].name, 0, &r, NULL);
        size_t end = *n + PER;
        for (unsigned d = 0; sb && d < sb->ndrive; d++)
            if (sb->drive[d] && (v[*n] = strndup(sb->drive[d], strcspn(sb->drive[d], ","))))
                (*n)++;
        if (sb)
            sandbox_arg_paths(sb, v, n, end);
        sandbox_free(sb);
    }
    free(info);
    if (!v) {
        fprintf(stderr, "moat: image prune: out of memory\n");
        return -1;
    }
    *out = v;
    return 0;
}

static int image_prune(struct img_store *s, int argc, char **argv)
{
    unsigned grace = PRUNE_GRACE_S;
    if (argc == 3 && !strcmp(argv[1], "--grace"))
        grace = (unsigned)parse_uint(argv[2], "--grace", 10u * 365 * 86400);
    else if (argc != 1)
        return usage_err();
    struct img_prune_result r;
    struct img_err err = { 0 };
    char **keep;
    size_t nkeep;
    if (sandbox_drives(&keep, &nkeep) < 0)
        return 1;
    int rc = img_store_prune_keep(s, grace, (const char *const *)keep, nkeep, &r, &err);
    for (size_t i = 0; i < nkeep; i++)
        free(keep[i]);
    free(keep);
    if (rc)
        return image_fail("prune", &err);
    char size[32];
    human_size(r.bytes, size, sizeof size);
    printf("removed %u blob%s, %u root filesystem%s, %u temporary file%s: %s\n", r.blobs,
           r.blobs == 1 ? "" : "s", r.rootfs, r.rootfs == 1 ? "" : "s", r.tmp, r.tmp == 1 ? "" : "s", size);
    return 0;
}

static void imported(const char *ref, const char *digest, void *arg)
{
    (void)arg;
    printf("imported %s (%s)\n", ref, digest);
}

static int image_import(struct img_store *s, int argc, char **argv)
{
    const char *path = NULL, *tag = NULL, *platform = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tag") && i + 1 < argc)
            tag = argv[++i];
        else if (!strcmp(argv[i], "--platform") && i + 1 < argc)
            platform = argv[++i];
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            return usage_err();
    }
    if (!path)
        return usage_err();
    struct img_err err = { 0 };
    if (img_import(s, path, tag, platform, imported, NULL, &err) < 0)
        return image_fail("import", &err);
    return 0;
}

static int image_export(struct img_store *s, int argc, char **argv)
{
    if (argc != 3 || argv[1][0] == '-' || argv[2][0] == '-')
        return usage_err();
    struct img_err err = { 0 };
    if (img_export(s, argv[1], argv[2], &err))
        return image_fail("export", &err);
    printf("exported %s to %s\n", argv[1], argv[2]);
    return 0;
}

int cmd_image(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        image_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    const struct image_sub *sub = NULL;
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
        if (!strcmp(subs[i].name, argv[1]))
            sub = &subs[i];
    if (!sub) {
        fprintf(stderr, "moat: image: unknown subcommand '%s'\n", argv[1]);
        return usage_err();
    }
    if (argc > 2 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
        image_usage(stdout);
        return 0;
    }
    char home[4096];
    if (cli_moat_home(home, sizeof home))
        return 1;
    struct img_store s;
    struct img_err err = { 0 };
    if (img_store_open(&s, home, &err))
        return image_fail(argv[1], &err);
    int rc = sub->fn(&s, argc - 1, argv + 1);
    img_store_close(&s);
    return rc;
}
