/* moat seccomp: the seccomp allow-lists of this build, per thread kind
 * (docs/security.md, "Seccomp"; vmm/base/scfilter.c holds the tables). */
#include <stdio.h>
#include <string.h>

#include "vmm/base/scfilter.h"
#include "vmm/cli/cli.h"

static const char usage_seccomp[] =
    "usage: moat seccomp [--print]\n"
    "\n"
    "The seccomp allow-list of each thread kind in this build: one line per\n"
    "kind with the number of distinct system calls it allows; --print adds\n"
    "the names. docs/security.md, \"Seccomp\".\n";

int cmd_seccomp(int argc, char **argv)
{
    int names = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--print")) {
            names = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_seccomp, stdout);
            return 0;
        } else {
            fprintf(stderr, "moat: seccomp: unknown argument %s\n%s", argv[i], usage_seccomp);
            return EXIT_USAGE;
        }
    }
    for (int k = 0; k < SC_KIND_N; k++) {
        size_t n;
        const char *const *l = sc_names((enum sc_kind)k, &n);
        printf("%-8s %2d", sc_kind_name((enum sc_kind)k), sc_count((enum sc_kind)k));
        for (size_t i = 0; names && i < n; i++)
            printf("%s%s", i ? " " : "  ", l[i]);
        printf("\n");
    }
    if (sc_san_extra())
        printf("(sanitizer build: %d of these are the sanitizer runtime's, in every list; "
               "the main thread stays unfiltered for the leak check at exit)\n",
               sc_san_extra());
    return 0;
}
