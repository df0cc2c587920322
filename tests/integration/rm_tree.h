/* Removing a test's temporary directory and everything in it (snapshot
 * memory files are large; in the nested harness /tmp is RAM shared with
 * the checks that follow). */
#ifndef MOAT_TEST_RM_TREE_H
#define MOAT_TEST_RM_TREE_H

#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static inline int rm_tree_entry(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    return flag == FTW_DP ? rmdir(p) : unlink(p);
}

/* dir and all below it, links not followed; 0 or -1 (what is left is
 * named on stderr). */
static inline int rm_tree(const char *dir)
{
    if (nftw(dir, rm_tree_entry, 8, FTW_DEPTH | FTW_PHYS) == 0)
        return 0;
    fprintf(stderr, "cannot remove all of %s\n", dir);
    return -1;
}

#endif
