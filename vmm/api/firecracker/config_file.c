/* --config-file FILE: each section as its PUT request, then
 * InstanceStart. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api/firecracker/fc_vmm.h"

static int config_section(void *opaque, const char *key, size_t index, const char *text, size_t len, char *why,
                          size_t wlen)
{
    struct fcvm *s = opaque;
    struct reply rep = { 0, NULL };
    (void)index;
    enum fc_ep ep = !strcmp(key, "boot-source") ? FC_EP_BOOT_SOURCE : !strcmp(key, "machine-config") ?
                    FC_EP_MACHINE_CONFIG : !strcmp(key, "drives") ? FC_EP_DRIVES : !strcmp(key,
                    "network-interfaces") ? FC_EP_NET : !strcmp(key, "vsock") ? FC_EP_VSOCK : !strcmp(key,
                    "logger") ? FC_EP_LOGGER : !strcmp(key, "metrics") ? FC_EP_METRICS : !strcmp(key,
                    "mmds-config") ? FC_EP_MMDS_CONFIG : !strcmp(key, "entropy") ? FC_EP_ENTROPY
                    : !strcmp(key, "balloon") ? FC_EP_BALLOON : FC_EP_CPU_CONFIG;
    unsigned st = fc_dispatch(s, ep, FC_PUT, NULL, text, len, &rep);
    if (st >= 400) {
        json_t *j = rep.body ? json_loads(rep.body, 0, NULL) : NULL;
        snprintf(why, wlen, "config file: `%s`: %s", key,
                 j && json_string_value(json_object_get(j, "fault_message"))
                     ? json_string_value(json_object_get(j, "fault_message")) : "refused");
        json_decref(j);
    }
    free(rep.body);
    return st >= 400 ? -EINVAL : 0;
}

int fc_config_boot(struct fcvm *s, const char *path)
{
    FILE *f = fopen(path, "r");
    static char text[1 << 20];
    size_t n = f ? fread(text, 1, sizeof text, f) : 0;
    char why[700];
    int bad = !f || ferror(f) || n == sizeof text;
    if (f)
        fclose(f);
    int r = bad ? -EINVAL : fc_config_sections(text, n, config_section, s, why, sizeof why);
    struct reply rep = { 0, NULL };
    if (r == 0 && fc_instance_start(s, &rep) >= 400) {
        json_t *j = rep.body ? json_loads(rep.body, 0, NULL) : NULL;
        snprintf(why, sizeof why, "%s", j ? json_string_value(json_object_get(j, "fault_message")) : "?");
        json_decref(j);
        r = -EINVAL;
    }
    free(rep.body);
    if (r < 0) {
        fprintf(stderr, "moat vmm: %s\n", bad ? "cannot read the config file (missing, unreadable or over 1 MiB)"
                                              : why);
        LOG(FC_LVL_ERROR, "Configuration for VMM from one single json failed: %s", bad ? path : why);
    }
    return r;
}
