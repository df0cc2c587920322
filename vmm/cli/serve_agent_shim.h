/* The agent client's filesystem calls that the envd module (serve_envd.c)
 * uses, as the `moat serve` contract fixes them (docs/agent-protocol.md:
 * STAT, LIST, RENAME, REMOVE). They belong to vmm/agent/agent_client.h;
 * until that header declares them, the
 * declarations below stand in, so this module builds on its own. The
 * agent protocol defines AGENT_STAT_NOFOLLOW along with them: once it
 * does, this file is only the #include. */
#ifndef MOAT_SERVE_AGENT_SHIM_H
#define MOAT_SERVE_AGENT_SHIM_H

#include <stddef.h>
#include <stdint.h>

#include "vmm/agent/agent_client.h"

#ifndef AGENT_STAT_NOFOLLOW
#define AGENT_FT_FILE    1u
#define AGENT_FT_DIR     2u
#define AGENT_FT_SYMLINK 3u
#define AGENT_FT_OTHER   4u

struct agent_stat {
    uint32_t type, mode, uid, gid;
    uint64_t size;
    int64_t mtime_sec;
    uint32_t mtime_nsec;
    char path[4097], owner[64], group[64], link[4097];
};
int agent_client_stat(struct agent_client *c, const char *path, int nofollow,
                      struct agent_stat *st, char *err, size_t errlen);
int agent_client_list(struct agent_client *c, const char *path, unsigned depth,
                      int (*cb)(void *arg, const struct agent_stat *e), void *arg,
                      char *err, size_t errlen);
int agent_client_rename(struct agent_client *c, const char *src, const char *dst,
                        char *err, size_t errlen);
int agent_client_remove(struct agent_client *c, const char *path, int recursive,
                        char *err, size_t errlen);
int agent_client_last_errno(const struct agent_client *c);
#endif

#endif
