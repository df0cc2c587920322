/* The Firecracker-compatible API's request decoding (vmm/api/firecracker/fc_req.c):
 * routes, every body's accepted shapes, and every malformed case refused
 * with a message naming the field. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vmm/api/firecracker/fc_req.h"

static char why[700];

#define BAD(call, needle)                                                                   \
    do {                                                                                    \
        why[0] = 0;                                                                         \
        ck_assert_int_eq((call), -EINVAL);                                                  \
        ck_assert_msg(strstr(why, needle) != NULL, "'%s' does not say '%s'", why, needle); \
    } while (0)
#define S(x) x, strlen(x)

START_TEST(routes)
{
    enum fc_ep ep;
    enum fc_method m;
    char id[FC_ID_MAX + 1];
    static const struct { const char *meth, *url; enum fc_ep ep; const char *id; } ok[] = {
        { "GET", "/", FC_EP_ROOT, "" }, { "GET", "/version", FC_EP_VERSION, "" },
        { "PUT", "/machine-config", FC_EP_MACHINE_CONFIG, "" },
        { "PATCH", "/machine-config", FC_EP_MACHINE_CONFIG, "" },
        { "PUT", "/drives/rootfs", FC_EP_DRIVES, "rootfs" }, { "PATCH", "/drives/drive_1", FC_EP_DRIVES, "drive_1" },
        { "PUT", "/network-interfaces/eth0", FC_EP_NET, "eth0" }, { "PUT", "/snapshot/load", FC_EP_SNAP_LOAD, "" },
        { "PUT", "/snapshot/create", FC_EP_SNAP_CREATE, "" }, { "GET", "/mmds", FC_EP_MMDS, "" },
        { "PUT", "/mmds/config", FC_EP_MMDS_CONFIG, "" }, { "GET", "/vm/config", FC_EP_VM_CONFIG, "" },
        { "PATCH", "/vm", FC_EP_VM, "" }, { "PUT", "/entropy", FC_EP_ENTROPY, "" },
        { "PUT", "/balloon", FC_EP_BALLOON, "" }, { "GET", "/balloon/statistics", FC_EP_BALLOON, "" },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ck_assert_msg(fc_route(ok[i].meth, ok[i].url, &ep, &m, id, sizeof id, why, sizeof why) == 0, "%s %s: %s",
                      ok[i].meth, ok[i].url, why);
        ck_assert_int_eq(ep, ok[i].ep);
        ck_assert_str_eq(id, ok[i].id);
    }
    static const struct { const char *meth, *url; } bad[] = {
        { "DELETE", "/" }, { "POST", "/actions" }, { "GET", "/actions" }, { "PUT", "/" }, { "GET", "/nothing" },
        { "PUT", "/drives" }, { "PUT", "/drives/" }, { "PUT", "/drives/a/b" }, { "GET", "/drives/a" },
        { "PUT", "/machine-configx" }, { "GET", "" }, { "PUT", "/vm" }, { "get", "/" }, { "GET", "//" },
        { "GET", "/machine-config/" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        BAD(fc_route(bad[i].meth, bad[i].url, &ep, &m, id, sizeof id, why, sizeof why),
            "Invalid request method and/or path");
    BAD(fc_route("PUT", "/drives/a-b", &ep, &m, id, sizeof id, why, sizeof why), "Invalid ID");
    BAD(fc_route("PUT", "/drives/a%20b", &ep, &m, id, sizeof id, why, sizeof why), "Invalid ID");
    char longid[100] = "/drives/";
    memset(longid + 8, 'a', 65);
    BAD(fc_route("PUT", longid, &ep, &m, id, sizeof id, why, sizeof why), "Invalid ID");
    longid[8 + 64] = 0;
    ck_assert_int_eq(fc_route("PUT", longid, &ep, &m, id, sizeof id, why, sizeof why), 0);
    ck_assert_uint_eq(strlen(id), 64);
}
END_TEST

START_TEST(bad_json_everywhere)
{
    struct fc_machine_cfg mc;
    static const char *const bodies[] = { "", "{", "[]", "1", "null", "\"x\"", "{\"a\":1,\"a\":1}", "{} {}",
                                          "{\"vcpu_count\":1,}" };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++)
        BAD(fc_decode_machine_cfg(S(bodies[i]), false, &mc, why, sizeof why), "bad JSON body");
    /* The server refuses a body over its limit (--http-api-max-payload-size,
     * at most FC_BODY_CAP) first; the decoders refuse one over the cap. */
    char *big = malloc(FC_BODY_CAP + 10);
    memset(big, ' ', FC_BODY_CAP + 10);
    big[0] = '{';
    big[FC_BODY_CAP + 9] = '}';
    BAD(fc_decode_machine_cfg(big, FC_BODY_CAP + 10, true, &mc, why, sizeof why), "larger than the limit of 16777216");
    big[FC_BODY_MAX + 9] = '}';
    memcpy(big + 1, "\"mem_size_mib\":64", 16);
    ck_assert_int_eq(fc_decode_machine_cfg(big, FC_BODY_MAX + 10, true, &mc, why, sizeof why), 0);
    free(big);
}
END_TEST

START_TEST(machine_config)
{
    struct fc_machine_cfg mc;
    ck_assert_int_eq(fc_decode_machine_cfg(S("{\"vcpu_count\":2,\"mem_size_mib\":256,\"smt\":false,"
                                             "\"track_dirty_pages\":true,\"cpu_template\":\"None\"}"),
                                           false, &mc, why, sizeof why), 0);
    ck_assert(mc.has_vcpu && mc.has_mem && mc.track_dirty_pages && mc.has_dirty);
    ck_assert_uint_eq(mc.vcpu_count, 2);
    ck_assert_uint_eq(mc.mem_size_mib, 256);
    ck_assert_int_eq(fc_decode_machine_cfg(S("{\"mem_size_mib\":64}"), true, &mc, why, sizeof why), 0);
    ck_assert(!mc.has_vcpu && mc.has_mem);
    /* A PATCH that changes nothing: Firecracker's "Empty PATCH request." */
    BAD(fc_decode_machine_cfg(S("{}"), true, &mc, why, sizeof why), "Empty PATCH request.");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":null,\"smt\":null}"), true, &mc, why, sizeof why),
        "Empty PATCH request.");
    BAD(fc_decode_machine_cfg(S("{\"vcpus\":1}"), true, &mc, why, sizeof why), "unknown field `vcpus`");
    ck_assert_int_eq(fc_decode_machine_cfg(S("{\"smt\":false}"), true, &mc, why, sizeof why), 0);
    ck_assert_int_eq(fc_decode_machine_cfg(S("{\"cpu_template\":\"None\"}"), true, &mc, why, sizeof why), 0);
    ck_assert_int_eq(fc_decode_machine_cfg(S("{\"vcpu_count\":1,\"mem_size_mib\":64,\"smt\":null}"), false, &mc,
                                           why, sizeof why), 0);
    BAD(fc_decode_machine_cfg(S("{\"mem_size_mib\":64}"), false, &mc, why, sizeof why),
        "missing required field `vcpu_count`");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":1}"), false, &mc, why, sizeof why),
        "missing required field `mem_size_mib`");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":1,\"mem_size_mib\":64,\"vcpus\":1}"), false, &mc, why, sizeof why),
        "unknown field `vcpus`");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":\"1\",\"mem_size_mib\":64}"), false, &mc, why, sizeof why),
        "field `vcpu_count`: expected an unsigned integer");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":-1,\"mem_size_mib\":64}"), false, &mc, why, sizeof why),
        "field `vcpu_count`: expected an unsigned integer");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":1.5,\"mem_size_mib\":64}"), false, &mc, why, sizeof why),
        "field `vcpu_count`");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":0,\"mem_size_mib\":64}"), false, &mc, why, sizeof why),
        "field `vcpu_count`: 0 is out of range");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":33,\"mem_size_mib\":64}"), false, &mc, why, sizeof why),
        "out of range");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":1,\"mem_size_mib\":0}"), false, &mc, why, sizeof why),
        "field `mem_size_mib`");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":1,\"mem_size_mib\":64,\"smt\":1}"), false, &mc, why, sizeof why),
        "field `smt`: expected a boolean");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":2,\"mem_size_mib\":64,\"smt\":true}"), false, &mc, why,
                              sizeof why), "field `smt`: simultaneous multithreading is not supported");
    BAD(fc_decode_machine_cfg(S("{\"vcpu_count\":1,\"mem_size_mib\":64,\"cpu_template\":\"T2\"}"), false, &mc, why,
                              sizeof why), "field `cpu_template`: unknown variant `T2`");
}
END_TEST

START_TEST(boot_source)
{
    struct fc_boot_source b;
    ck_assert_int_eq(fc_decode_boot_source(S("{\"kernel_image_path\":\"/k\",\"boot_args\":\"console=ttyS0\","
                                             "\"initrd_path\":\"/i\"}"), &b, why, sizeof why), 0);
    ck_assert_str_eq(b.kernel_image_path, "/k");
    ck_assert_str_eq(b.boot_args, "console=ttyS0");
    ck_assert(b.has_initrd && b.has_boot_args);
    ck_assert_str_eq(b.initrd_path, "/i");
    ck_assert_int_eq(fc_decode_boot_source(S("{\"kernel_image_path\":\"/k\",\"initrd_path\":null}"), &b, why,
                                           sizeof why), 0);
    ck_assert(!b.has_initrd && !b.has_boot_args);
    BAD(fc_decode_boot_source(S("{\"boot_args\":\"x\"}"), &b, why, sizeof why),
        "missing required field `kernel_image_path`");
    BAD(fc_decode_boot_source(S("{\"kernel_image_path\":\"\"}"), &b, why, sizeof why),
        "field `kernel_image_path`: must not be empty");
    BAD(fc_decode_boot_source(S("{\"kernel_image_path\":\"/a\\u0000b\"}"), &b, why, sizeof why), "NUL");
    BAD(fc_decode_boot_source(S("{\"kernel_image_path\":7}"), &b, why, sizeof why),
        "field `kernel_image_path`: expected a string");
    char *lng = malloc(FC_STR_MAX + 64);
    int n = snprintf(lng, FC_STR_MAX + 64, "{\"kernel_image_path\":\"");
    memset(lng + n, 'a', FC_STR_MAX);
    strcpy(lng + n + FC_STR_MAX, "\"}");
    BAD(fc_decode_boot_source(S(lng), &b, why, sizeof why), "too long");
    free(lng);
}
END_TEST

START_TEST(drives)
{
    struct fc_drive d;
    ck_assert_int_eq(fc_decode_drive(S("{\"drive_id\":\"rootfs\",\"path_on_host\":\"/r.ext4\",\"is_root_device\":true,"
                                       "\"is_read_only\":false,\"cache_type\":\"Writeback\",\"io_engine\":\"Async\","
                                       "\"rate_limiter\":{\"bandwidth\":{\"size\":1000,\"refill_time\":100},"
                                       "\"ops\":{\"size\":10,\"one_time_burst\":5,\"refill_time\":1000}}}"),
                                     "rootfs", false, &d, why, sizeof why), 0);
    ck_assert(d.is_root_device && !d.is_read_only && d.cache_writeback && d.io_async && d.rate_limiter.set);
    ck_assert_uint_eq(d.rate_limiter.cfg.bandwidth.size, 1000);
    ck_assert_uint_eq(d.rate_limiter.cfg.ops.one_time_burst, 5);
    ck_assert_int_eq(fc_decode_drive(S("{\"drive_id\":\"rootfs\",\"path_on_host\":\"/new\"}"), "rootfs", true, &d,
                                     why, sizeof why), 0);
    ck_assert(d.has_path && !d.rate_limiter.set);
    ck_assert_int_eq(fc_decode_drive(S("{\"drive_id\":\"r\",\"rate_limiter\":{}}"), "r", true, &d, why, sizeof why),
                     0);
    ck_assert(d.rate_limiter.set && !d.has_path);
    BAD(fc_decode_drive(S("{\"drive_id\":\"other\",\"path_on_host\":\"/r\",\"is_root_device\":false}"), "rootfs",
                        false, &d, why, sizeof why), "The id from the path does not match the id from the body!");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"path_on_host\":\"/r\"}"), "r", false, &d, why, sizeof why),
        "missing required field `is_root_device`");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"is_root_device\":false}"), "r", false, &d, why, sizeof why),
        "missing required field `path_on_host`");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"path_on_host\":\"/r\",\"is_root_device\":false,"
                          "\"cache_type\":\"Fast\"}"), "r", false, &d, why, sizeof why),
        "field `cache_type`: unknown variant `Fast`, expected one of Unsafe, Writeback");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"path_on_host\":\"/r\",\"is_root_device\":false,"
                          "\"io_engine\":\"Uring\"}"), "r", false, &d, why, sizeof why), "field `io_engine`");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"path_on_host\":\"/r\",\"is_root_device\":false,"
                          "\"socket\":\"/s\"}"), "r", false, &d, why, sizeof why), "field `socket`");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"is_root_device\":false}"), "r", true, &d, why, sizeof why),
        "unknown field `is_root_device`");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"rate_limiter\":{\"bandwidth\":{\"size\":1}}}"), "r", true, &d, why,
                        sizeof why), "field `rate_limiter`");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"rate_limiter\":{\"bandwith\":{}}}"), "r", true, &d, why,
                        sizeof why), "field `rate_limiter`");
    BAD(fc_decode_drive(S("{\"drive_id\":\"r\",\"rate_limiter\":[]}"), "r", true, &d, why, sizeof why),
        "field `rate_limiter`: expected an object");
    BAD(fc_decode_drive(S("{\"path_on_host\":\"/x\"}"), "r", true, &d, why, sizeof why),
        "missing required field `drive_id`");
}
END_TEST

START_TEST(network_interfaces)
{
    struct fc_net n;
    ck_assert_int_eq(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"guest_mac\":"
                                     "\"AA:FC:00:00:00:01\",\"rx_rate_limiter\":{\"bandwidth\":{\"size\":100,"
                                     "\"refill_time\":10}},\"tx_rate_limiter\":null}"),
                                   "eth0", false, &n, why, sizeof why), 0);
    ck_assert_str_eq(n.host_dev_name, "tap0");
    ck_assert_str_eq(n.guest_mac, "AA:FC:00:00:00:01");
    ck_assert(n.rx.set && !n.tx.set);
    ck_assert_uint_eq(n.mtu, 0);
    /* mtu: VIRTIO_NET_F_MTU, 68 .. 65535 */
    ck_assert_int_eq(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"mtu\":68}"), "eth0",
                                   false, &n, why, sizeof why), 0);
    ck_assert_uint_eq(n.mtu, 68);
    ck_assert_int_eq(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"mtu\":65535}"), "eth0",
                                   false, &n, why, sizeof why), 0);
    ck_assert_uint_eq(n.mtu, 65535);
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"mtu\":67}"), "eth0", false, &n,
                      why, sizeof why), "field `mtu`: 67 is out of range (68 .. 65535)");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"mtu\":65536}"), "eth0", false, &n,
                      why, sizeof why), "field `mtu`: 65536 is out of range");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"mtu\":\"1500\"}"), "eth0", false,
                      &n, why, sizeof why), "field `mtu`: expected an unsigned integer");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"mtu\":1500}"), "eth0", true, &n, why, sizeof why),
        "unknown field `mtu`");   /* not in PATCH's shape */
    ck_assert_int_eq(fc_decode_net(S("{\"iface_id\":\"eth0\",\"tx_rate_limiter\":{\"ops\":{\"size\":1,"
                                     "\"refill_time\":1}}}"), "eth0", true, &n, why, sizeof why), 0);
    ck_assert(n.tx.set && n.tx.cfg.ops.size == 1);
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\"}"), "eth0", false, &n, why, sizeof why),
        "missing required field `host_dev_name`");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"allow_mmds_requests\":true}"), "eth0",
                      false, &n, why, sizeof why), "unknown field `allow_mmds_requests`");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"guest_mac\":\"zz:00:00:00:00:00\"}"),
                      "eth0", false, &n, why, sizeof why), "field `guest_mac`");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\",\"guest_mac\":\"00:00:00:00:00\"}"),
                      "eth0", false, &n, why, sizeof why), "field `guest_mac`");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"a-very-long-tap-name\"}"), "eth0", false, &n,
                      why, sizeof why), "field `host_dev_name`: too long");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth1\",\"host_dev_name\":\"tap0\"}"), "eth0", false, &n, why, sizeof why),
        "does not match");
    BAD(fc_decode_net(S("{\"iface_id\":\"eth0\",\"host_dev_name\":\"tap0\"}"), "eth0", true, &n, why, sizeof why),
        "unknown field `host_dev_name`");
}
END_TEST

START_TEST(vsock_actions_vm)
{
    struct fc_vsock v;
    ck_assert_int_eq(fc_decode_vsock(S("{\"vsock_id\":\"vsock0\",\"guest_cid\":3,\"uds_path\":\"/tmp/v.sock\"}"), &v,
                                     why, sizeof why), 0);
    ck_assert_uint_eq(v.guest_cid, 3);
    BAD(fc_decode_vsock(S("{\"guest_cid\":2,\"uds_path\":\"/v\"}"), &v, why, sizeof why), "field `guest_cid`");
    BAD(fc_decode_vsock(S("{\"guest_cid\":3}"), &v, why, sizeof why), "missing required field `uds_path`");
    BAD(fc_decode_vsock(S("{\"guest_cid\":4294967296,\"uds_path\":\"/v\"}"), &v, why, sizeof why),
        "field `guest_cid`");
    enum fc_action a;
    ck_assert_int_eq(fc_decode_action(S("{\"action_type\":\"InstanceStart\"}"), &a, why, sizeof why), 0);
    ck_assert_int_eq(a, FC_ACT_START);
    ck_assert_int_eq(fc_decode_action(S("{\"action_type\":\"FlushMetrics\"}"), &a, why, sizeof why), 0);
    ck_assert_int_eq(a, FC_ACT_FLUSH_METRICS);
    ck_assert_int_eq(fc_decode_action(S("{\"action_type\":\"SendCtrlAltDel\"}"), &a, why, sizeof why), 0);
    ck_assert_int_eq(a, FC_ACT_CTRL_ALT_DEL);
    BAD(fc_decode_action(S("{\"action_type\":\"instancestart\"}"), &a, why, sizeof why),
        "unknown variant `instancestart`");
    BAD(fc_decode_action(S("{}"), &a, why, sizeof why), "missing required field `action_type`");
    BAD(fc_decode_action(S("{\"action_type\":\"InstanceStart\",\"payload\":1}"), &a, why, sizeof why),
        "unknown field `payload`");
    bool paused;
    ck_assert_int_eq(fc_decode_vm_state(S("{\"state\":\"Paused\"}"), &paused, why, sizeof why), 0);
    ck_assert(paused);
    ck_assert_int_eq(fc_decode_vm_state(S("{\"state\":\"Resumed\"}"), &paused, why, sizeof why), 0);
    ck_assert(!paused);
    BAD(fc_decode_vm_state(S("{\"state\":\"Running\"}"), &paused, why, sizeof why), "unknown variant `Running`");
    BAD(fc_decode_vm_state(S("{\"state\":true}"), &paused, why, sizeof why), "field `state`: expected a string");
}
END_TEST

START_TEST(snapshots)
{
    struct fc_snap_create c;
    ck_assert_int_eq(fc_decode_snap_create(S("{\"snapshot_type\":\"Diff\",\"snapshot_path\":\"/s\","
                                             "\"mem_file_path\":\"/m\"}"), &c, why, sizeof why), 0);
    ck_assert(c.diff);
    ck_assert_int_eq(fc_decode_snap_create(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\"}"), &c, why,
                                           sizeof why), 0);
    ck_assert(!c.diff);
    BAD(fc_decode_snap_create(S("{\"snapshot_path\":\"/s\"}"), &c, why, sizeof why),
        "missing required field `mem_file_path`");
    BAD(fc_decode_snap_create(S("{\"snapshot_type\":\"Half\",\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\"}"),
                              &c, why, sizeof why), "field `snapshot_type`");
    struct fc_snap_load *l = malloc(sizeof *l);
    ck_assert_int_eq(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_backend\":{\"backend_type\":\"Uffd\","
                                           "\"backend_path\":\"/uffd.sock\"},\"resume_vm\":false}"), l, why,
                                         sizeof why), 0);
    ck_assert(l->uffd && !l->resume_vm);
    ck_assert_str_eq(l->mem_path, "/uffd.sock");
    ck_assert_int_eq(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"resume_vm\":true,"
                                           "\"enable_diff_snapshots\":true,\"network_overrides\":[{\"iface_id\":"
                                           "\"eth0\",\"host_dev_name\":\"tap9\"}]}"), l, why, sizeof why), 0);
    ck_assert(!l->uffd && l->resume_vm && l->enable_diff_snapshots);
    ck_assert_uint_eq(l->noverrides, 1);
    ck_assert_str_eq(l->overrides[0].host_dev_name, "tap9");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\"}"), l, why, sizeof why), "exactly one of");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"mem_backend\":{\"backend_type\":"
                              "\"File\",\"backend_path\":\"/m\"}}"), l, why, sizeof why), "exactly one of");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_backend\":{\"backend_type\":\"Disk\","
                              "\"backend_path\":\"/m\"}}"), l, why, sizeof why), "field `mem_backend.backend_type`");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_backend\":{\"backend_type\":\"File\"}}"), l, why,
                            sizeof why), "missing required field `mem_backend.backend_path`");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_backend\":{\"backend_type\":\"File\","
                              "\"backend_path\":\"/m\",\"x\":1}}"), l, why, sizeof why),
        "unknown field `mem_backend.x`");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"network_overrides\":[1]}"), l,
                            why, sizeof why), "network_overrides[].: expected a JSON object");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"network_overrides\":"
                              "[{\"iface_id\":\"e\"}]}"), l, why, sizeof why),
        "missing required field `network_overrides[].host_dev_name`");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"resume_vm\":\"yes\"}"), l, why,
                            sizeof why), "field `resume_vm`: expected a boolean");
    /* vsock_override {uds_path}, clock_realtime, huge_pages */
    ck_assert_int_eq(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"vsock_override\":"
                                           "{\"uds_path\":\"/run/v.sock\"},\"clock_realtime\":false,"
                                           "\"huge_pages\":\"None\"}"), l, why, sizeof why), 0);
    ck_assert_str_eq(l->vsock_uds, "/run/v.sock");
    ck_assert_int_eq(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"huge_pages\":"
                                           "\"Snapshot\",\"vsock_override\":null}"), l, why, sizeof why), 0);
    ck_assert_str_eq(l->vsock_uds, "");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"vsock_override\":{}}"), l,
                            why, sizeof why), "missing required field `vsock_override.uds_path`");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"vsock_override\":"
                              "{\"uds_path\":\"/v\",\"guest_cid\":3}}"), l, why, sizeof why),
        "unknown field `vsock_override.guest_cid`");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"vsock_override\":"
                              "{\"uds_path\":\"\"}}"), l, why, sizeof why), "field `vsock_override.uds_path`: must not");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"vsock_override\":\"/v\"}"), l,
                            why, sizeof why), "field `vsock_override`: expected an object");
    static char longuds[300];
    snprintf(longuds, sizeof longuds, "{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"vsock_override\":"
             "{\"uds_path\":\"/%0120d\"}}", 0);
    BAD(fc_decode_snap_load(S(longuds), l, why, sizeof why), "field `vsock_override.uds_path`: too long");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"clock_realtime\":true}"), l,
                            why, sizeof why), "field `clock_realtime`: not supported by moat");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"clock_realtime\":1}"), l,
                            why, sizeof why), "field `clock_realtime`: expected a boolean");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"huge_pages\":\"2M\"}"), l,
                            why, sizeof why), "field `huge_pages`: `2M` is not supported by moat");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"huge_pages\":\"Transparent\"}"),
                            l, why, sizeof why), "field `huge_pages`: `Transparent` is not supported");
    BAD(fc_decode_snap_load(S("{\"snapshot_path\":\"/s\",\"mem_file_path\":\"/m\",\"huge_pages\":\"1G\"}"), l,
                            why, sizeof why), "field `huge_pages`: unknown variant `1G`");
    free(l);
}
END_TEST

START_TEST(mmds_logger_metrics_entropy)
{
    struct fc_mmds_config m;
    ck_assert_int_eq(fc_decode_mmds_config(S("{\"version\":\"V1\",\"network_interfaces\":[\"eth0\",\"eth1\"]}"), &m,
                                           why, sizeof why), 0);
    ck_assert(m.v1);
    ck_assert_uint_eq(m.nifaces, 2);
    ck_assert_str_eq(m.ifaces[1], "eth1");
    ck_assert_int_eq(fc_decode_mmds_config(S("{\"network_interfaces\":[\"eth0\"],\"ipv4_address\":"
                                             "\"169.254.169.254\"}"), &m, why, sizeof why), 0);
    ck_assert(m.v1);   /* Firecracker's default version: V1 */
    ck_assert_int_eq(fc_decode_mmds_config(S("{\"version\":\"V2\",\"network_interfaces\":[\"eth0\"]}"), &m, why,
                                           sizeof why), 0);
    ck_assert(!m.v1);
    BAD(fc_decode_mmds_config(S("{\"version\":\"V2\"}"), &m, why, sizeof why),
        "missing required field `network_interfaces`");
    BAD(fc_decode_mmds_config(S("{\"network_interfaces\":[]}"), &m, why, sizeof why), "field `network_interfaces`");
    BAD(fc_decode_mmds_config(S("{\"network_interfaces\":[1]}"), &m, why, sizeof why), "field `network_interfaces`");
    BAD(fc_decode_mmds_config(S("{\"network_interfaces\":[\"e\"],\"ipv4_address\":\"10.0.0.1\"}"), &m, why,
                              sizeof why), "field `ipv4_address`");
    BAD(fc_decode_mmds_config(S("{\"network_interfaces\":[\"e\"],\"version\":\"V3\"}"), &m, why, sizeof why),
        "field `version`");
    struct fc_logger lg;
    ck_assert_int_eq(fc_decode_logger(S("{\"log_path\":\"/l\",\"level\":\"debug\",\"show_level\":true,"
                                        "\"show_log_origin\":false}"), &lg, why, sizeof why), 0);
    ck_assert(lg.has_level && lg.level == FC_LVL_DEBUG && lg.show_level && lg.has_show_origin && !lg.show_log_origin);
    ck_assert_int_eq(fc_decode_logger(S("{\"level\":\"Warning\"}"), &lg, why, sizeof why), 0);
    ck_assert_int_eq(lg.level, FC_LVL_WARN);
    ck_assert_str_eq(lg.log_path, "");
    BAD(fc_decode_logger(S("{\"level\":\"Loud\"}"), &lg, why, sizeof why), "field `level`: unknown variant `Loud`");
    BAD(fc_decode_logger(S("{\"log_path\":\"/l\",\"options\":[]}"), &lg, why, sizeof why), "unknown field `options`");
    struct fc_metrics mt;
    ck_assert_int_eq(fc_decode_metrics(S("{\"metrics_path\":\"/m\"}"), &mt, why, sizeof why), 0);
    ck_assert_str_eq(mt.metrics_path, "/m");
    ck_assert(!mt.emit_id);
    ck_assert_str_eq(mt.properties, "");
    BAD(fc_decode_metrics(S("{}"), &mt, why, sizeof why), "missing required field `metrics_path`");
    ck_assert_int_eq(fc_decode_metrics(S("{\"metrics_path\":\"/m\",\"emit_id\":true,\"properties\":"
                                         "{\"team\":\"a\",\"cell\":\"b 1\"}}"), &mt, why, sizeof why), 0);
    ck_assert(mt.emit_id);
    ck_assert_str_eq(mt.properties, "{\"cell\":\"b 1\",\"team\":\"a\"}");
    ck_assert_int_eq(fc_decode_metrics(S("{\"metrics_path\":\"/m\",\"emit_id\":null,\"properties\":null}"), &mt,
                                       why, sizeof why), 0);
    ck_assert(!mt.emit_id && !mt.properties[0]);
    BAD(fc_decode_metrics(S("{\"metrics_path\":\"/m\",\"emit_id\":1}"), &mt, why, sizeof why),
        "field `emit_id`: expected a boolean");
    BAD(fc_decode_metrics(S("{\"metrics_path\":\"/m\",\"properties\":{\"n\":1}}"), &mt, why, sizeof why),
        "field `properties.n`: expected a string");
    BAD(fc_decode_metrics(S("{\"metrics_path\":\"/m\",\"properties\":[]}"), &mt, why, sizeof why),
        "field `properties`: expected an object");
    char many[2000] = "{\"metrics_path\":\"/m\",\"properties\":{";
    for (int i = 0; i <= FC_METRIC_PROPS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"k%d\":\"v\"", i ? "," : "", i);
    strcat(many, "}}");
    BAD(fc_decode_metrics(S(many), &mt, why, sizeof why), "field `properties`: at most");
    static char huge[FC_STR_MAX + 100];
    snprintf(huge, sizeof huge, "{\"metrics_path\":\"/m\",\"properties\":{\"k\":\"%0*d\"}}", FC_STR_MAX, 0);
    BAD(fc_decode_metrics(S(huge), &mt, why, sizeof why), "field `properties`: too long");
    struct fc_entropy e;
    ck_assert_int_eq(fc_decode_entropy(S("{}"), &e, why, sizeof why), 0);
    ck_assert(!e.rate_limiter.set);
    ck_assert_int_eq(fc_decode_entropy(S("{\"rate_limiter\":{\"bandwidth\":{\"size\":1,\"refill_time\":1}}}"), &e,
                                       why, sizeof why), 0);
    ck_assert(e.rate_limiter.set);
    BAD(fc_decode_entropy(S("{\"rate\":1}"), &e, why, sizeof why), "unknown field `rate`");
}
END_TEST

START_TEST(mmds_documents)
{
    char *doc = NULL;
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"a\":{\"b\":1,\"c\":2},\"d\":\"x\"}"), false, FC_BODY_MAX, why, sizeof why), 0);
    ck_assert_str_eq(doc, "{\"a\":{\"b\":1,\"c\":2},\"d\":\"x\"}");
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"a\":{\"b\":null,\"e\":[1]},\"d\":null,\"f\":true}"), true, FC_BODY_MAX, why,
                                    sizeof why), 0);
    ck_assert_str_eq(doc, "{\"a\":{\"c\":2,\"e\":[1]},\"f\":true}");
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"f\":{\"g\":1}}"), true, FC_BODY_MAX, why, sizeof why), 0);
    ck_assert_str_eq(doc, "{\"a\":{\"c\":2,\"e\":[1]},\"f\":{\"g\":1}}");
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"z\":0}"), false, FC_BODY_MAX, why, sizeof why), 0);
    ck_assert_str_eq(doc, "{\"z\":0}");
    BAD(fc_mmds_update(&doc, S("[1,2]"), false, FC_BODY_MAX, why, sizeof why), "expected a JSON object");
    BAD(fc_mmds_update(&doc, S("{"), true, FC_BODY_MAX, why, sizeof why), "bad JSON body");
    ck_assert_str_eq(doc, "{\"z\":0}");
    free(doc);
    doc = NULL;
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"k\":null}"), true, FC_BODY_MAX, why, sizeof why), 0);
    ck_assert_str_eq(doc, "{}");
    /* A patch that grows the document past the limit is refused. */
    char *big = malloc(40000);
    memset(big, 'a', 40000);
    memcpy(big, "{\"x\":\"", 6);
    memcpy(big + 40000 - 2, "\"}", 2);
    ck_assert_int_eq(fc_mmds_update(&doc, big, 40000, true, FC_BODY_MAX, why, sizeof why), 0);
    big[2] = 'y';   /* a second key as long: the merged document is too large */
    why[0] = 0;
    ck_assert_int_eq(fc_mmds_update(&doc, big, 40000, true, FC_BODY_MAX, why, sizeof why), -EFBIG);
    ck_assert_str_eq(why, "MMDS limit exceeded error: The MMDS patch request doesn't fit.");
    free(big);
    free(doc);
    /* --mmds-size-limit: the compact document, at most limit bytes */
    doc = NULL;
    ck_assert_int_eq(fc_mmds_update(&doc, S("{ \"a\" : \"0123456789\" }"), false, 18, why, sizeof why), 0);
    ck_assert_str_eq(doc, "{\"a\":\"0123456789\"}");   /* 18 bytes */
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"a\":\"01234567890\"}"), false, 18, why, sizeof why), -EFBIG);
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"b\":1}"), true, 18, why, sizeof why), -EFBIG);
    ck_assert_str_eq(doc, "{\"a\":\"0123456789\"}");   /* unchanged */
    ck_assert_int_eq(fc_mmds_update(&doc, S("{\"a\":null,\"b\":1}"), true, 18, why, sizeof why), 0);
    ck_assert_str_eq(doc, "{\"b\":1}");
    free(doc);
}
END_TEST

struct seen {
    char keys[16][32];
    size_t idx[16];
    size_t n;
    int fail_at;
};

static int record(void *opaque, const char *key, size_t index, const char *text, size_t len, char *w, size_t wl)
{
    struct seen *s = opaque;
    (void)text;
    (void)len;
    if ((int)s->n == s->fail_at) {
        snprintf(w, wl, "refused %s", key);
        return -EINVAL;
    }
    snprintf(s->keys[s->n], sizeof s->keys[0], "%s", key);
    s->idx[s->n++] = index;
    return 0;
}

START_TEST(config_file)
{
    struct seen s = { .fail_at = -1 };
    const char *cfg = "{\"drives\":[{\"drive_id\":\"a\"},{\"drive_id\":\"b\"}],\"boot-source\":{\"kernel_image_path\":"
                      "\"/k\"},\"machine-config\":{\"vcpu_count\":1,\"mem_size_mib\":64},\"vsock\":null}";
    ck_assert_int_eq(fc_config_sections(S(cfg), record, &s, why, sizeof why), 0);
    ck_assert_uint_eq(s.n, 4);
    ck_assert_str_eq(s.keys[0], "boot-source");
    ck_assert_str_eq(s.keys[1], "machine-config");
    ck_assert_str_eq(s.keys[2], "drives");
    ck_assert_str_eq(s.keys[3], "drives");
    ck_assert_uint_eq(s.idx[3], 1);
    s.n = 0;
    s.fail_at = 1;
    BAD(fc_config_sections(S(cfg), record, &s, why, sizeof why), "refused machine-config");
    s.fail_at = -1;
    /* An unknown top-level key is ignored, as Firecracker ignores it. */
    s.n = 0;
    ck_assert_int_eq(fc_config_sections(S("{\"boot_source\":{},\"machine-config\":{},\"future\":[1]}"), record, &s,
                                        why, sizeof why), 0);
    ck_assert_uint_eq(s.n, 1);
    ck_assert_str_eq(s.keys[0], "machine-config");
    BAD(fc_config_sections(S("{\"drives\":{}}"), record, &s, why, sizeof why), "field `drives`: expected an array");
    BAD(fc_config_sections(S("{\"vsock\":[]}"), record, &s, why, sizeof why), "field `vsock`: expected an object");
    BAD(fc_config_sections(S("[]"), record, &s, why, sizeof why), "expected a JSON object");
    BAD(fc_config_sections(S("{"), record, &s, why, sizeof why), "bad JSON");
}
END_TEST

START_TEST(option_helpers)
{
    char b[64];
    struct ratelimit_bucket_cfg c = { 1000, 0, 100 };
    fc_bucket_opt(&c, b, sizeof b);
    ck_assert_str_eq(b, "1000/100");
    c.one_time_burst = 7;
    fc_bucket_opt(&c, b, sizeof b);
    ck_assert_str_eq(b, "1000/100/7");
    c.size = 0;
    fc_bucket_opt(&c, b, sizeof b);
    ck_assert_str_eq(b, "off");
    ck_assert(fc_opt_safe("/var/lib/a,b=c d"));
    ck_assert(!fc_opt_safe(""));
    ck_assert(!fc_opt_safe("a\"b"));
    ck_assert(!fc_opt_safe("a\nb"));
}
END_TEST

START_TEST(log_lines)
{
    char b[200];
    struct timespec ts = { 1700000000, 5 };
    size_t n = fc_log_line(b, sizeof b, &ts, "vm-1", "fc_api", FC_LVL_INFO, false, "f.c", 7, false, "hello");
    ck_assert_str_eq(b, "2023-11-14T22:13:20.000000005 [vm-1:fc_api] hello\n");
    ck_assert_uint_eq(n, strlen(b));
    fc_log_line(b, sizeof b, &ts, "vm-1", "fc_vcpu 0", FC_LVL_ERROR, true, "vmm/cli/cli_fc.c", 42, true, "a\nb\tc");
    ck_assert_str_eq(b, "2023-11-14T22:13:20.000000005 [vm-1:fc_vcpu 0:ERROR:vmm/cli/cli_fc.c:42] a b c\n");
    fc_log_line(b, sizeof b, &ts, "i", "t", FC_LVL_WARN, true, "", 0, false, "m");
    ck_assert_str_eq(b, "2023-11-14T22:13:20.000000005 [i:t:WARN] m\n");
    /* Cut to fit, still one line. */
    char small[40];
    n = fc_log_line(small, sizeof small, &ts, "vm-1", "fc_api", FC_LVL_INFO, false, "", 0, false,
                    "a long message that does not fit");
    ck_assert_uint_eq(n, sizeof small - 1);
    ck_assert_uint_eq(strlen(small), sizeof small - 1);
    ck_assert_int_eq(small[sizeof small - 2], '\n');
    ck_assert_ptr_null(memchr(small, '\n', sizeof small - 2));
}
END_TEST

START_TEST(net_stats)
{
    struct fc_net_counts c;
    const char *ok = "mac 06:00:ac:10:00:02\n"
                     "tx frames 12 bytes 3400 dropped 1 local 0 bad 0 backend-errors 0 throttled 5\n"
                     "rx frames 7 bytes 900 dropped 0 bad 2 throttled 3\n"
                     "metadata requests 4 bad 0 tokens 1 no-token 0 invalid-token 0\n";
    ck_assert_int_eq(fc_net_stats_parse(ok, &c), 0);
    ck_assert_uint_eq(c.tx_frames, 12);
    ck_assert_uint_eq(c.tx_bytes, 3400);
    ck_assert_uint_eq(c.tx_throttled, 5);
    ck_assert_uint_eq(c.rx_frames, 7);
    ck_assert_uint_eq(c.rx_bytes, 900);
    ck_assert_uint_eq(c.rx_throttled, 3);
    ck_assert_int_eq(fc_net_stats_parse("rx frames 1 bytes 2 dropped 0 bad 0 throttled 0\ntx frames 3 bytes 4 "
                                        "dropped 0 local 0 bad 0 backend-errors 0 throttled 9", &c), 0);
    ck_assert_uint_eq(c.tx_throttled, 9);
    ck_assert_uint_eq(c.rx_bytes, 2);
    static const char *const bad[] = {
        "", "mac x\n", "tx frames 1 bytes 2 throttled 3\n",                      /* no rx line */
        "tx frames 1 bytes 2 throttled 3\nrx frames 1 bytes x throttled 0\n",    /* not a number */
        "tx frames 1 bytes 2 throttled 3\nrx frames 1 throttled 0\n",            /* bytes missing */
        "tx frames 1 bytes 2 throttled 3\nrx frames 1 bytes 2 throttled -1\n",   /* negative */
        "tx frames 1 bytes 99999999999999999999999 throttled 3\nrx frames 1 bytes 2 throttled 1\n",
        "tx frames 1 bytes 2x throttled 3\nrx frames 1 bytes 2 throttled 1\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(fc_net_stats_parse(bad[i], &c) == -EINVAL, "accepted: %s", bad[i]);
}
END_TEST

START_TEST(blk_stats)
{
    struct fc_blk_counts c;
    ck_assert_int_eq(fc_blk_stats_parse("requests ok 9 failed 3 bad 1 reads 4 read-bytes 2048 writes 2 write-bytes "
                                        "1024 flushes 3 capacity 2048\n", &c), 0);
    ck_assert_uint_eq(c.failed, 3);
    ck_assert_uint_eq(c.bad, 1);
    ck_assert_uint_eq(c.reads, 4);
    ck_assert_uint_eq(c.read_bytes, 2048);
    ck_assert_uint_eq(c.writes, 2);
    ck_assert_uint_eq(c.write_bytes, 1024);
    ck_assert_uint_eq(c.flushes, 3);
    ck_assert_int_eq(fc_blk_stats_parse("other 1\nrequests ok 0 failed 0 bad 0 reads 0 read-bytes 0 writes 0 "
                                        "write-bytes 0 flushes 7", &c), 0);
    ck_assert_uint_eq(c.flushes, 7);
    static const char *const bad[] = {
        "", "requests\n", "tx frames 1 bytes 2 throttled 3\n",
        "requests ok 1 failed 0 bad 0 reads 1 writes 0 write-bytes 0 flushes 0\n",           /* read-bytes missing */
        "requests ok 1 failed 0 bad 0 reads 1 read-bytes x writes 0 write-bytes 0 flushes 0\n",
        "requests ok 1 failed 0 bad 0 reads 1 read-bytes 1 writes 0 write-bytes 0 flushes -1\n",
        "requests ok 1 failed 0 bad 0 reads 1 read-bytes 99999999999999999999999 writes 0 write-bytes 0 "
        "flushes 0\n",
        "requests ok 1 failed 0 bad 0 reads 1 read-bytes 1 writes 0 write-bytes 0\nflushes 0\n",  /* next line */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(fc_blk_stats_parse(bad[i], &c) == -EINVAL, "accepted: %s", bad[i]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fc_req");
    TCase *tc = tcase_create("decode");
    tcase_add_test(tc, routes);
    tcase_add_test(tc, bad_json_everywhere);
    tcase_add_test(tc, machine_config);
    tcase_add_test(tc, boot_source);
    tcase_add_test(tc, drives);
    tcase_add_test(tc, network_interfaces);
    tcase_add_test(tc, vsock_actions_vm);
    tcase_add_test(tc, snapshots);
    tcase_add_test(tc, mmds_logger_metrics_entropy);
    tcase_add_test(tc, mmds_documents);
    tcase_add_test(tc, config_file);
    tcase_add_test(tc, option_helpers);
    tcase_add_test(tc, log_lines);
    tcase_add_test(tc, net_stats);
    tcase_add_test(tc, blk_stats);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
