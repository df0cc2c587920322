/* Replays a fuzz target's corpus as a Check suite: one test per file in
 * FUZZ_CORPUS_DIR (sorted by name), each feeding the file to
 * LLVMFuzzerTestOneInput in a forked child, so a sanitizer report or a
 * crash fails just that test. A corpus that is missing or empty fails.
 * With arguments, replays those files instead (e.g. a crash artifact):
 *   build/tests/replay_virtq build/fuzz/artifacts/virtq-crash-...
 * Built with gcc + ASan/UBSan by tests/fuzz/fuzz.mk. */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char **files;
static int nfiles;

static int add_file(const char *path)
{
    char **n = realloc(files, (size_t)(nfiles + 1) * sizeof *files);
    if (!n)
        return -1;
    files = n;
    files[nfiles] = strdup(path);
    if (!files[nfiles])
        return -1;
    nfiles++;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void scan_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (add_file(p) < 0)
            break;
    }
    closedir(d);
    qsort(files, (size_t)nfiles, sizeof *files, cmp);
}

START_TEST(replay_one)
{
    const char *path = files[_i];
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_msg(n >= 0, "cannot size %s", path);
    rewind(f);
    /* Exactly-sized heap copy, so ASan catches any read past the input. */
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    ck_assert_int_eq(LLVMFuzzerTestOneInput(buf, (size_t)n), 0);
    free(buf);
}
END_TEST

START_TEST(corpus_not_empty)
{
    ck_assert_msg(nfiles > 0, "fuzz corpus %s is empty or missing", FUZZ_CORPUS_DIR);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            add_file(argv[i]);
    } else {
        scan_dir(FUZZ_CORPUS_DIR);
    }
    Suite *s = suite_create("replay_" FUZZ_NAME);
    TCase *tc = tcase_create("corpus");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, corpus_not_empty);
    if (nfiles > 0)
        tcase_add_loop_test(tc, replay_one, 0, nfiles);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (nf) {
        /* Check names a failing loop iteration by its index. */
        for (int i = 0; i < nfiles; i++)
            fprintf(stderr, "replay_%s iteration %d: %s\n", FUZZ_NAME, i, files[i]);
    }
    for (int i = 0; i < nfiles; i++)
        free(files[i]);
    free(files);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
