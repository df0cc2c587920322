/* The uffd memory backend of a restore (vmm/snapshot/uffd.h): the
 * handshake's JSON (pure: every field, several regions, every refusal),
 * and the whole hand-over against a listening socket of this test: guest
 * memory registered, one message with the regions and the userfaultfd,
 * and a fault on that memory served through the received descriptor
 * (skipped where userfaultfd is not available). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"
#include "vmm/snapshot/snapvm.h"
#include "vmm/snapshot/uffd.h"

START_TEST(json_one_region)
{
    struct uffd_region r = { .host = 0x7f0000000000ull, .size = 64ull << 20, .offset = 0, .page_size = 4096 };
    char buf[UFFD_HANDSHAKE_MAX];
    long n = uffd_mappings_json(&r, 1, buf, sizeof buf);
    const char *want = "[{\"base_host_virt_addr\":139637976727552,\"size\":67108864,\"offset\":0,"
                       "\"page_size\":4096,\"page_size_kib\":4096}]";
    ck_assert_str_eq(buf, want);
    ck_assert_int_eq(n, (long)strlen(want));
}
END_TEST

START_TEST(json_two_regions_parse_back)
{
    /* RAM split around the 3 GiB hole: the part above is at offset 3 GiB */
    struct uffd_region r[2] = {
        { .host = 0x7f0000000000ull, .size = 3ull << 30, .offset = 0, .page_size = 4096 },
        { .host = 0x7f00c0000000ull, .size = 1ull << 30, .offset = 3ull << 30, .page_size = 4096 },
    };
    char buf[UFFD_HANDSHAKE_MAX];
    ck_assert_int_gt(uffd_mappings_json(r, 2, buf, sizeof buf), 0);
    json_error_t je;
    json_t *a = json_loads(buf, 0, &je);
    ck_assert_msg(json_is_array(a), "%s: %s", buf, je.text);
    ck_assert_uint_eq(json_array_size(a), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *o = json_array_get(a, i);
        ck_assert_uint_eq(json_object_size(o), 5);
        ck_assert_uint_eq((uint64_t)json_integer_value(json_object_get(o, "base_host_virt_addr")), r[i].host);
        ck_assert_uint_eq((uint64_t)json_integer_value(json_object_get(o, "size")), r[i].size);
        ck_assert_uint_eq((uint64_t)json_integer_value(json_object_get(o, "offset")), r[i].offset);
        ck_assert_uint_eq((uint64_t)json_integer_value(json_object_get(o, "page_size")), 4096);
        ck_assert_uint_eq((uint64_t)json_integer_value(json_object_get(o, "page_size_kib")), 4096);
    }
    json_decref(a);
}
END_TEST

START_TEST(json_refusals)
{
    struct uffd_region r[UFFD_MAX_REGIONS + 1];
    for (unsigned i = 0; i <= UFFD_MAX_REGIONS; i++)
        r[i] = (struct uffd_region){ .host = 0x1000ull * (i + 1), .size = 4096, .offset = 4096ull * i,
                                     .page_size = 4096 };
    char buf[UFFD_HANDSHAKE_MAX];
    ck_assert_int_eq(uffd_mappings_json(r, 0, buf, sizeof buf), -EINVAL);
    ck_assert_int_eq(uffd_mappings_json(r, UFFD_MAX_REGIONS + 1, buf, sizeof buf), -EINVAL);
    ck_assert_int_gt(uffd_mappings_json(r, UFFD_MAX_REGIONS, buf, sizeof buf), 0);
    struct uffd_region bad = r[0];
    bad.size = 0;
    ck_assert_int_eq(uffd_mappings_json(&bad, 1, buf, sizeof buf), -EINVAL);
    bad = r[0];
    bad.page_size = 0;
    ck_assert_int_eq(uffd_mappings_json(&bad, 1, buf, sizeof buf), -EINVAL);
    bad.page_size = 3000;
    ck_assert_int_eq(uffd_mappings_json(&bad, 1, buf, sizeof buf), -EINVAL);
    bad.page_size = 2u << 20;       /* huge pages: fine */
    ck_assert_int_gt(uffd_mappings_json(&bad, 1, buf, sizeof buf), 0);
    /* too small a buffer, down to none at all: never past cap */
    long full = uffd_mappings_json(r, 2, buf, sizeof buf);
    for (size_t cap = 0; cap <= (size_t)full; cap++) {
        char small[UFFD_HANDSHAKE_MAX];
        memset(small, 'x', sizeof small);
        ck_assert_int_eq(uffd_mappings_json(r, 2, small, cap), -ENOSPC);
        ck_assert_int_eq(small[cap], 'x');
    }
    ck_assert_int_eq(uffd_mappings_json(r, 2, buf, (size_t)full + 1), full);
}
END_TEST

/* ---- the hand-over ---- */

static void *touch(void *arg)
{
    volatile uint8_t *p = arg;
    return (void *)(uintptr_t)p[100];
}

static bool uffd_usable(char *why, size_t wlen)
{
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, wlen, "userfaultfd: %s", strerror(errno));
        return false;
    }
    close(fd);
    return true;
}

START_TEST(handshake_and_fault)
{
    char why[200];
    if (!uffd_usable(why, sizeof why)) {
        printf("SKIPPED: handshake_and_fault: %s\n", why);
        return;
    }
    char path[] = "/tmp/moat-uffd-test-XXXXXX";
    int tf = mkstemp(path);
    ck_assert_int_ge(tf, 0);
    close(tf);
    unlink(path);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_eq(bind(ls, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(ls, 1), 0);

    struct moat_vm *vm = calloc(1, sizeof(*vm));
    struct snapvm *sv = NULL;
    ck_assert_int_eq(snapvm_attach(vm, false, &sv), 0);     /* as moat_create gives every VM */
    vm->ram_map_size = 64 * 4096;
    vm->ram = mmap(NULL, vm->ram_map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(vm->ram, MAP_FAILED);
    vm->mem.n = 2;
    vm->mem.r[0] = (struct gmem_region){ 0, 48 * 4096, vm->ram };
    vm->mem.r[1] = (struct gmem_region){ 1ull << 32, 16 * 4096, vm->ram + 48 * 4096 };
    struct uffd_setup s = { .socket_path = path };
    ck_assert_msg(uffd_map_hook(vm, &s) == 0, "%s", s.why);
    ck_assert_int_ge(sv->uffd, 0);
    ck_assert_int_ge(sv->uffd_sock, 0);

    int c = accept(ls, NULL, NULL);
    ck_assert_int_ge(c, 0);
    char body[UFFD_HANDSHAKE_MAX + 1];
    union { char b[CMSG_SPACE(sizeof(int))]; struct cmsghdr a; } ctl;
    struct iovec iov = { body, sizeof body - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b };
    ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);
    ck_assert_int_gt(n, 0);
    body[n] = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    ck_assert_ptr_nonnull(cm);
    ck_assert_int_eq(cm->cmsg_type, SCM_RIGHTS);
    int uffd;
    memcpy(&uffd, CMSG_DATA(cm), sizeof(int));
    char want[UFFD_HANDSHAKE_MAX];
    struct uffd_region r[2] = {
        { (uint64_t)(uintptr_t)vm->ram, 48 * 4096, 0, 4096 },
        { (uint64_t)(uintptr_t)(vm->ram + 48 * 4096), 16 * 4096, 48 * 4096, 4096 },
    };
    ck_assert_int_gt(uffd_mappings_json(r, 2, want, sizeof want), 0);
    ck_assert_str_eq(body, want);

    /* a touch of page 50 (second region) waits for us */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, touch, vm->ram + 50 * 4096), 0);
    struct pollfd p = { uffd, POLLIN, 0 };
    ck_assert_int_eq(poll(&p, 1, 10000), 1);
    struct uffd_msg m;
    ck_assert_int_eq(read(uffd, &m, sizeof m), (ssize_t)sizeof m);
    ck_assert_uint_eq(m.event, UFFD_EVENT_PAGEFAULT);
    ck_assert_uint_eq(m.arg.pagefault.address & ~4095ull, (uint64_t)(uintptr_t)(vm->ram + 50 * 4096));
    static uint8_t page[4096] __attribute__((aligned(4096)));
    memset(page, 0xab, sizeof page);
    struct uffdio_copy cp = { .dst = (uint64_t)(uintptr_t)(vm->ram + 50 * 4096),
                              .src = (uint64_t)(uintptr_t)page, .len = 4096 };
    ck_assert_int_eq(ioctl(uffd, UFFDIO_COPY, &cp), 0);
    void *got;
    pthread_join(t, &got);
    ck_assert_uint_eq((uintptr_t)got, 0xab);

    close(uffd);
    close(c);
    close(ls);
    unlink(path);
    munmap(vm->ram, vm->ram_map_size);
    vm_hooks_destroy(vm);       /* closes sv->uffd and sv->uffd_sock, as vm_free does */
    free(vm);
}
END_TEST

START_TEST(handshake_errors)
{
    char why[200];
    if (!uffd_usable(why, sizeof why)) {
        printf("SKIPPED: handshake_errors: %s\n", why);
        return;
    }
    struct moat_vm *vm = calloc(1, sizeof(*vm));
    struct snapvm *sv = NULL;
    ck_assert_int_eq(snapvm_attach(vm, false, &sv), 0);     /* as moat_create gives every VM */
    vm->ram_map_size = 4 * 4096;
    vm->ram = mmap(NULL, vm->ram_map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    vm->mem.n = 1;
    vm->mem.r[0] = (struct gmem_region){ 0, vm->ram_map_size, vm->ram };
    /* nobody listening */
    struct uffd_setup s = { .socket_path = "/nonexistent/moat-uffd.sock" };
    ck_assert_int_eq(uffd_map_hook(vm, &s), -ENOENT);
    ck_assert_msg(strstr(s.why, "/nonexistent/moat-uffd.sock") && strstr(s.why, "listening"), "%s", s.why);
    close(sv->uffd);
    close(sv->uffd_sock);
    sv->uffd = sv->uffd_sock = -1;
    /* an empty path, one too long for a socket */
    struct uffd_setup e = { .socket_path = "" };
    ck_assert_int_eq(uffd_map_hook(vm, &e), -EINVAL);
    ck_assert_int_eq(sv->uffd, -1);
    char longp[200];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = 0;
    struct uffd_setup l = { .socket_path = longp };
    ck_assert_int_eq(uffd_map_hook(vm, &l), -EINVAL);
    ck_assert_ptr_nonnull(strstr(l.why, "1 to 107 bytes"));
    munmap(vm->ram, vm->ram_map_size);
    vm_hooks_destroy(vm);
    free(vm);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("uffd");
    TCase *tc = tcase_create("uffd");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, json_one_region);
    tcase_add_test(tc, json_two_regions_parse_back);
    tcase_add_test(tc, json_refusals);
    tcase_add_test(tc, handshake_and_fault);
    tcase_add_test(tc, handshake_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
