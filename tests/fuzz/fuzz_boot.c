/* Fuzz target: the input is a kernel image (bzImage or ELF) probed and
 * loaded into a small guest (3 MiB at 0 plus 64 KiB at 4 GiB). The first
 * bytes also become an initrd and command-line arguments. Any crash,
 * sanitizer report or out-of-bounds write is a bug. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "boot/boot.h"
#include "vmm/base/layout.h"

#define LOW_SIZE  (3u << 20)
#define HIGH_SIZE (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *low, *high;
    if (!low) {
        low = calloc(1, LOW_SIZE);
        high = calloc(1, HIGH_SIZE);
        if (!low || !high)
            return 0;
    }
    struct gmem m = { .n = 2 };
    m.r[0] = (struct gmem_region){ 0, LOW_SIZE, low };
    m.r[1] = (struct gmem_region){ LAYOUT_4G, HIGH_SIZE, high };

    enum boot_kind kind;
    const char *why = NULL;
    int r = boot_probe_why(data, size, size & 1, &kind, &why);
    if (!why || (r != 0 && r != -EINVAL && r != -ENOEXEC))
        abort();

    struct boot_config cfg = {
        .kernel = data, .kernel_len = size,
        .initrd = data, .initrd_len = size < 4096 ? size : 4096,
        .cmdline = "console=ttyS0 panic=-1",
        .ncpus = 1 + (unsigned)(size % LAYOUT_MAX_CPUS),
        .prefer_pvh = size & 1,
    };
    struct boot_info bi;
    int lr = boot_load_why(&m, &cfg, &bi, &why);
    if (lr == 0) {
        if (r != 0 || bi.kind != kind)
            abort();
        if (bi.kernel_start < LAYOUT_HIMEM || bi.entry < bi.kernel_start ||
            bi.entry >= bi.kernel_end || !gmem_ptr(&m, bi.entry, 1))
            abort();
        if (bi.initrd_size && !gmem_ptr(&m, bi.initrd_start, bi.initrd_size))
            abort();
    } else if (r == 0 && lr != -ENOMEM && lr != -EINVAL && lr != -E2BIG) {
        abort();
    }

    /* Command-line building over NUL-separated words of the input. */
    const char *argv[8];
    char words[128];
    size_t n = size < sizeof(words) - 1 ? size : sizeof(words) - 1;
    memcpy(words, data, n);
    words[n] = '\0';
    size_t argc = 0;
    for (size_t i = 0; i < n && argc < 8; i += strlen(words + i) + 1)
        argv[argc++] = words + i;
    char line[96];
    r = boot_cmdline_build(line, sizeof(line), "console=ttyS0", NULL, 0, argv, argc);
    if (r == 0 && strlen(line) >= sizeof(line))
        abort();
    return 0;
}
