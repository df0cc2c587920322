/* The image mode of the default guest's /init (docs/guest.md, "Image
 * mode"): the run config moat delivers as /moat/image.cfg in an extra
 * initramfs archive, and the image's user resolved against its own
 * /etc/passwd and /etc/group. Pure parsing, no I/O: /init
 * (guest/init/init.c) links it, tests/unit/test_guest_imgcfg.c tests it,
 * tests/fuzz/fuzz_guest_imgcfg.c fuzzes it. Both inputs are hostile: the
 * config carries an image's strings, passwd and group are the image's.
 *
 * The config (written by vmm/image/runcfg.c): lines "KEY=VALUE", the
 * first exactly "moat-image 1"; in a VALUE, "\\" is a backslash and "\n"
 * a newline (no other escape); keys:
 *   arg=A        the command, one word a line, in order (Docker's rules
 *                already applied on the host)
 *   env=K=V      the environment, in order (K not empty, no '=' in K)
 *   workdir=DIR  absolute; at most once
 *   user=SPEC    name, uid, name:group, uid:gid (also name:gid, uid:group);
 *                at most once
 *   explicit=0|1 the command was given on moat's command line (with the
 *                agent, /init runs only such a command); at most once */
#ifndef MOAT_GUEST_IMGCFG_H
#define MOAT_GUEST_IMGCFG_H

#include <stddef.h>
#include <sys/types.h>

#define IMGCFG_MAGIC      "moat-image 1"
#define IMGCFG_MAX_BYTES  (1u << 20)
#define IMGCFG_MAX_ARGS   4096
#define IMGCFG_MAX_ENV    4096
#define IMGCFG_MAX_GROUPS 64
#define IMGCFG_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct imgcfg {
    char *argv[IMGCFG_MAX_ARGS + 1];    /* NULL-ended; into the parsed buffer */
    int argc;
    char *env[IMGCFG_MAX_ENV + 4];      /* NULL-ended; room for imgcfg_env_finish */
    int nenv;
    const char *workdir;                /* NULL: "/" */
    const char *user;                   /* NULL: root */
    int explicit_cmd;
};

/* BUF[0..LEN) (LEN <= IMGCFG_MAX_BYTES, BUF has LEN + 1 bytes: it is
 * unescaped and split in place) into *C. 0, or -EINVAL with why in WHY
 * (a sentence, no newline). */
int imgcfg_parse(char *buf, size_t len, struct imgcfg *c, char *why, size_t wlen);

struct imguser {
    uid_t uid;
    gid_t gid;
    gid_t groups[IMGCFG_MAX_GROUPS];    /* supplementary groups, gid first */
    int ngroups;
    char home[256];                     /* the passwd entry's, else "/" */
};

/* SPEC (NULL or "": root) resolved as Docker (runc) does against PASSWD
 * and GROUP (the files' text, NUL-terminated; NULL: absent): a name must
 * be in passwd (a group name in group); a number need not be (then gid 0
 * and home "/" unless given). Supplementary groups: the explicit group
 * when one is given, else the user's gid and every group listing the user
 * by name. 0, or -ENOENT / -EINVAL with why in WHY. */
int imgcfg_user(const char *spec, const char *passwd, const char *group, struct imguser *u,
                char *why, size_t wlen);

/* The environment completed as Docker does: PATH (IMGCFG_DEFAULT_PATH),
 * HOSTNAME and HOME (the user's) added when absent. HOME, HOSTNAME are
 * copied into the caller's SPACE (SLEN bytes). */
void imgcfg_env_finish(struct imgcfg *c, const char *hostname, const char *home, char *space,
                       size_t slen);

#endif
