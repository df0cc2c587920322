/* Fuzz the Firecracker-compatible API's request decoding (vmm/api/firecracker/fc_req.c).
 * The first byte picks what the rest is: a body for one of the decoders,
 * an MMDS put or patch, a config file, a net device's stats text, or
 * "METHOD URL" for the router.
 * Every call gives 0 or -EINVAL with a message; on success the strings it
 * filled are NUL-terminated within their arrays, ids are valid, and an
 * MMDS document is a JSON object no larger than the limit. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/firecracker/fc_req.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char why[700];

static void check_rc(int rc)
{
    FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -EFBIG || rc == -ENOMEM);
    if (rc < 0)
        FUZZ_ASSERT(why[0] != 0 && strnlen(why, sizeof why) < sizeof why);
}

#define TERMINATED(a) FUZZ_ASSERT(memchr((a), 0, sizeof(a)) != NULL)

static int section(void *opaque, const char *key, size_t index, const char *text, size_t len, char *w, size_t wl)
{
    (void)opaque;
    (void)index;
    (void)w;
    (void)wl;
    FUZZ_ASSERT(key && text && strlen(text) == len);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *b = (const char *)data + 1;
    size_t n = size - 1;
    why[0] = 0;
    static union fc_body u;
    int rc;
    bool flag = data[0] & 0x80;
    switch (data[0] & 0x7f) {
    case 0:
        check_rc(rc = fc_decode_machine_cfg(b, n, flag, &u.mc, why, sizeof why));
        if (!rc && u.mc.has_vcpu)
            FUZZ_ASSERT(u.mc.vcpu_count >= 1 && u.mc.vcpu_count <= 32);
        break;
    case 1:
        check_rc(rc = fc_decode_boot_source(b, n, &u.bs, why, sizeof why));
        if (!rc) {
            TERMINATED(u.bs.kernel_image_path);
            FUZZ_ASSERT(u.bs.kernel_image_path[0]);
        }
        break;
    case 2:
        check_rc(rc = fc_decode_drive(b, n, flag ? NULL : "rootfs", flag, &u.d, why, sizeof why));
        if (!rc) {
            TERMINATED(u.d.drive_id);
            TERMINATED(u.d.path_on_host);
            FUZZ_ASSERT(flag || !strcmp(u.d.drive_id, "rootfs"));
        }
        break;
    case 3:
        check_rc(rc = fc_decode_net(b, n, "eth0", flag, &u.net, why, sizeof why));
        if (!rc) {
            FUZZ_ASSERT(!strcmp(u.net.iface_id, "eth0"));
            FUZZ_ASSERT(strlen(u.net.host_dev_name) < 16);
            FUZZ_ASSERT(u.net.guest_mac[0] == 0 || strlen(u.net.guest_mac) == 17);
        }
        break;
    case 4:
        check_rc(rc = fc_decode_vsock(b, n, &u.v, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(u.v.guest_cid >= 3 && strlen(u.v.uds_path) < 108);
        break;
    case 5: {
        enum fc_action a;
        check_rc(rc = fc_decode_action(b, n, &a, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(a >= FC_ACT_START && a <= FC_ACT_FLUSH_METRICS);
        break;
    }
    case 6: {
        bool p;
        check_rc(fc_decode_vm_state(b, n, &p, why, sizeof why));
        break;
    }
    case 7:
        check_rc(rc = fc_decode_snap_create(b, n, &u.sc, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(u.sc.snapshot_path[0] && u.sc.mem_file_path[0]);
        break;
    case 8:
        check_rc(rc = fc_decode_snap_load(b, n, &u.sl, why, sizeof why));
        if (!rc) {
            FUZZ_ASSERT(u.sl.snapshot_path[0] && u.sl.mem_path[0] && u.sl.noverrides <= FC_MAX_IFACES);
            TERMINATED(u.sl.mem_path);
        }
        break;
    case 9:
        check_rc(rc = fc_decode_mmds_config(b, n, &u.mm, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(u.mm.nifaces >= 1 && u.mm.nifaces <= FC_MAX_IFACES);
        break;
    case 10:
        check_rc(fc_decode_logger(b, n, &u.lg, why, sizeof why));
        break;
    case 11:
        check_rc(fc_decode_metrics(b, n, &u.mt, why, sizeof why));
        break;
    case 12:
        check_rc(fc_decode_entropy(b, n, &u.en, why, sizeof why));
        break;
    case 13: {
        char *doc = strdup("{\"a\":{\"b\":1}}");
        FUZZ_ASSERT(doc);
        check_rc(rc = fc_mmds_update(&doc, b, n, flag, FC_BODY_MAX, why, sizeof why));
        json_t *j = json_loads(doc, 0, NULL);
        FUZZ_ASSERT(j && json_is_object(j) && strlen(doc) <= FC_BODY_MAX);
        json_decref(j);
        free(doc);
        break;
    }
    case 14:
        check_rc(fc_config_sections(b, n, section, NULL, why, sizeof why));
        break;
    case 15: {
        static char text[8192];
        struct fc_net_counts c;
        if (n >= sizeof text)
            return 0;
        memcpy(text, b, n);
        text[n] = 0;
        rc = fc_net_stats_parse(text, &c);
        FUZZ_ASSERT(rc == 0 || rc == -EINVAL);
        struct fc_blk_counts bc;
        rc = fc_blk_stats_parse(text, &bc);
        FUZZ_ASSERT(rc == 0 || rc == -EINVAL);
        break;
    }
    default: {
        /* "METHOD URL": split at the first space. */
        static char line[4096];
        if (n >= sizeof line)
            return 0;
        memcpy(line, b, n);
        line[n] = 0;
        char *sp = strchr(line, ' ');
        if (!sp || strlen(line) != n)
            return 0;
        *sp = 0;
        enum fc_ep ep;
        enum fc_method m;
        char id[FC_ID_MAX + 1];
        check_rc(rc = fc_route(line, sp + 1, &ep, &m, id, sizeof id, why, sizeof why));
        if (!rc)
            FUZZ_ASSERT(ep >= FC_EP_ROOT && ep <= FC_EP_HOTPLUG && m >= FC_GET && m <= FC_PATCH &&
                        strlen(id) <= FC_ID_MAX);
        break;
    }
    }
    return 0;
}
