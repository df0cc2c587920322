/* moat jail's pure parts (vmm/sandbox/jail_spec.c, tests/unit/test_jail.c):
 * the jail id, --cgroup and --resource-limit specs, and the list of host
 * paths the jail exposes (docs/security.md, "Jail"). No I/O here. */
#ifndef MOAT_JAIL_SPEC_H
#define MOAT_JAIL_SPEC_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define JAIL_ID_MAX     64
#define JAIL_PATHS_MAX  64
#define JAIL_CG_VAL_MAX 64

/* 0 when ID is 1..JAIL_ID_MAX characters of [A-Za-z0-9_-]; else -EINVAL. */
int jail_check_id(const char *id);

/* --cgroup KEY=VALUE: KEY one of memory.max, memory.high, memory.swap.max,
 * cpu.max, cpu.weight, pids.max; VALUE 1..JAIL_CG_VAL_MAX-1 characters of
 * digits, lower-case letters and single inner spaces ("max 100000").
 * 0 with key (a static string) and val filled, or -EINVAL with why. */
struct jail_cg {
    const char *key;
    char val[JAIL_CG_VAL_MAX];
};
int jail_parse_cgroup(const char *spec, struct jail_cg *out, char *why, size_t wlen);

/* --resource-limit KEY=N: no-file (RLIMIT_NOFILE), nproc (RLIMIT_NPROC),
 * fsize (RLIMIT_FSIZE, bytes), as (RLIMIT_AS, bytes); N a decimal below
 * 2^63. 0 with *resource and *val, or -EINVAL with why. */
int jail_parse_rlimit(const char *spec, int *resource, uint64_t *val, char *why, size_t wlen);

/* A host path the jail makes visible at the same path inside it. */
struct jail_path {
    char path[PATH_MAX];
    int rw;         /* bind-mounted writable; else read-only */
    int may_create; /* an overlay moat creates if missing: when it is
                       missing, its directory is exposed instead */
};
struct jail_paths {
    struct jail_path p[JAIL_PATHS_MAX];
    int n;
};
/* 0 when PATH is absolute, not "/", without "." or ".." components or an
 * empty one ("//"), and shorter than PATH_MAX; else -EINVAL. */
int jail_check_path(const char *path);
/* Add PATH (checked as above; a second add of the same path keeps it once,
 * writable if either was). 0, -EINVAL, or -E2BIG past JAIL_PATHS_MAX. */
int jail_paths_add(struct jail_paths *l, const char *path, int rw);
/* Order the list so that a directory comes before any path below it
 * (shorter paths first, stable): bind-mounting in this order never hides
 * an earlier mount under a later one. */
void jail_paths_sort(struct jail_paths *l);
/* The inner moat command's own files: --kernel and --initrd (read-only),
 * --drive PATH (read-only with ",ro") and its overlay= (writable), and a
 * --device blk,path=F's F (read-only with ",ro") and overlay= (writable); both "--opt VALUE" and "--opt=VALUE". argv[0]
 * is "moat"; scanning stops at "--" (the guest's command). 0, or -EINVAL /
 * -E2BIG with why. */
int jail_inner_paths(int argc, char *const *argv, struct jail_paths *l, char *why, size_t wlen);
/* The inner moat command's --ready-fd N ("--ready-fd N" or "--ready-fd=N",
 * before "--"; the last one counts, as getopt's): N (3..2^20), the one
 * inherited descriptor the jail keeps open (the ready pipe of moat create
 * and start). -1 when there is none; -EINVAL with why for a value that is
 * not a decimal in that range, or a missing one. */
int jail_inner_ready_fd(int argc, char *const *argv, char *why, size_t wlen);

#endif
