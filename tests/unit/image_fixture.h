/* The image unit tests' fixture (test_image_store.c, test_image_layout.c):
 * a store in a fresh folder dir, its $MOAT_HOME dir/home, removed after. */
#ifndef MOAT_TEST_IMAGE_FIXTURE_H
#define MOAT_TEST_IMAGE_FIXTURE_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "vmm/image/store.h"

static char dir[256], home[300];
static struct img_store st;

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/moat-imgtest-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(home, sizeof home, "%s/home", dir);
    struct img_err err = { 0 };
    ck_assert_int_eq(img_store_open(&st, home, &err), 0);
}

static void teardown(void)
{
    img_store_close(&st);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* How many entries the store's folder sub ("blobs/sha256", "tmp") has. */
static int count_dir(const char *sub)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls -A '%s/images/%s' | wc -l", home, sub);
    FILE *p = popen(cmd, "r");
    int n = -1;
    ck_assert_int_eq(fscanf(p, "%d", &n), 1);
    pclose(p);
    return n;
}

#endif
