/* The host probe (vmm/core/host.c, vmm/core/kvm.c): the /proc/cpuinfo flag parser,
 * the classification into kvm / pvm / none with its reason, and
 * moat_host_info's size handling and environment overrides. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "include/moat.h"
#include "vmm/core/host.h"
#include "vmm/core/kvm.h"

static const char intel[] =
    "processor\t: 0\n"
    "vendor_id\t: GenuineIntel\n"
    "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep vmx smx est tm2 ssse3\n"
    "vmx flags\t: vnmi preemption_timer invvpid ept_x_only\n"
    "bugs\t\t: spectre_v1\n"
    "\n"
    "processor\t: 1\n"
    "flags\t\t: fpu vme de\n";

START_TEST(flags_whole_words)
{
    ck_assert(cpuinfo_has_flag(intel, "vmx"));
    ck_assert(cpuinfo_has_flag(intel, "fpu"));
    ck_assert(cpuinfo_has_flag(intel, "ssse3"));     /* last word, before the newline */
    ck_assert(!cpuinfo_has_flag(intel, "svm"));
    ck_assert(!cpuinfo_has_flag(intel, "vm"));       /* a prefix is not a flag */
    ck_assert(!cpuinfo_has_flag(intel, "vmxx"));
    ck_assert(!cpuinfo_has_flag(intel, "vnmi"));     /* "vmx flags" is another line */
    ck_assert(!cpuinfo_has_flag(intel, "spectre_v1"));
}
END_TEST

START_TEST(flags_amd_and_odd_input)
{
    ck_assert(cpuinfo_has_flag("flags : fpu svm lm\n", "svm"));
    ck_assert(cpuinfo_has_flag("flags\t: svm", "svm"));          /* no newline at the end */
    ck_assert(!cpuinfo_has_flag("flags : fpu svm_lock lm\n", "svm"));
    ck_assert(!cpuinfo_has_flag("", "svm"));
    ck_assert(!cpuinfo_has_flag("flags svm\n", "svm"));           /* no colon */
    ck_assert(!cpuinfo_has_flag("flagsvm : svm\n", "svm"));       /* not the flags key */
    ck_assert(!cpuinfo_has_flag("processor : 0\nmodel name : svm vmx\n", "svm"));
    /* Only the first CPU's line counts. */
    ck_assert(!cpuinfo_has_flag("flags : fpu\nflags : svm\n", "svm"));
    /* A very long line (a few thousand flags) is parsed to its end. */
    char *big = malloc(20000);
    strcpy(big, "flags :");
    for (int i = 0; i < 2000; i++)
        strcat(big, " f");
    strcat(big, " vmx\n");
    ck_assert(cpuinfo_has_flag(big, "vmx"));
    free(big);
}
END_TEST

START_TEST(classify_kinds)
{
    char why[256];
    struct host_facts none = { .open_rc = -2, .open_why = "cannot open /dev/kvm: No such file or directory",
                               .pvm = 1, .pvm_why = "no vmx or svm in /proc/cpuinfo's flags", .module = "" };
    ck_assert_int_eq(host_classify(&none, why, sizeof why), MOAT_HOST_NONE);
    ck_assert_ptr_nonnull(strstr(why, "no usable KVM"));
    ck_assert_ptr_nonnull(strstr(why, "No such file"));

    struct host_facts pvm = { .open_rc = 0, .pvm = 1, .pvm_why = "the kvm_pvm module is loaded", .module = "kvm_pvm" };
    ck_assert_int_eq(host_classify(&pvm, why, sizeof why), MOAT_HOST_PVM);
    ck_assert_ptr_nonnull(strstr(why, "PVM"));
    ck_assert_ptr_nonnull(strstr(why, "kvm_pvm module"));

    struct host_facts kvm = { .open_rc = 0, .pvm = 0, .pvm_why = "svm in /proc/cpuinfo's flags", .module = "kvm_amd" };
    ck_assert_int_eq(host_classify(&kvm, why, sizeof why), MOAT_HOST_KVM);
    ck_assert_ptr_nonnull(strstr(why, "hardware KVM (kvm_amd, svm"));

    /* No reasons given: still a sentence, never a NULL dereference. */
    struct host_facts bare = { .open_rc = -13 };
    ck_assert_int_eq(host_classify(&bare, why, sizeof why), MOAT_HOST_NONE);
    ck_assert_ptr_nonnull(strstr(why, "Permission denied"));
    struct host_facts bare_kvm = { .open_rc = 0 };
    ck_assert_int_eq(host_classify(&bare_kvm, why, sizeof why), MOAT_HOST_KVM);
    /* A tiny buffer is truncated, NUL-terminated. */
    char small[8];
    ck_assert_int_eq(host_classify(&pvm, small, sizeof small), MOAT_HOST_PVM);
    ck_assert_uint_eq(strlen(small), 7);
}
END_TEST

START_TEST(kind_names)
{
    ck_assert_str_eq(moat_host_kind_name(MOAT_HOST_KVM), "kvm");
    ck_assert_str_eq(moat_host_kind_name(MOAT_HOST_PVM), "pvm");
    ck_assert_str_eq(moat_host_kind_name(MOAT_HOST_NONE), "none");
    ck_assert_ptr_null(moat_host_kind_name(MOAT_HOST_UNKNOWN));   /* 0: not filled in */
    ck_assert_ptr_null(moat_host_kind_name(4));
    ck_assert_ptr_null(moat_host_kind_name(-1));
}
END_TEST

START_TEST(info_without_kvm_device)
{
    setenv("MOAT_KVM_DEV", "/nonexistent/kvm", 1);
    struct moat_host_info h = { .size = sizeof h };
    ck_assert_int_eq(moat_host_info(&h), 0);
    ck_assert_int_eq(h.kind, MOAT_HOST_NONE);
    ck_assert_int_eq(h.kvm_available, 0);
    ck_assert_int_eq(h.kvm_errno, 2);
    ck_assert_int_eq(h.api_version, 0);
    ck_assert_uint_eq(h.ncaps, 0);
    ck_assert_str_eq(h.device, "/nonexistent/kvm");
    ck_assert_ptr_nonnull(strstr(h.reason, "/nonexistent/kvm"));
    char why[64];
    ck_assert_int_eq(moat_host_kind(why, sizeof why), MOAT_HOST_NONE);
    ck_assert_ptr_nonnull(strstr(why, "no usable KVM"));
    ck_assert_int_eq(moat_host_kind(NULL, 0), MOAT_HOST_NONE);
    /* Not a KVM device at all. */
    setenv("MOAT_KVM_DEV", "/dev/null", 1);
    ck_assert_int_eq(moat_host_info(&h), 0);
    ck_assert_int_eq(h.kind, MOAT_HOST_NONE);
    ck_assert_ptr_nonnull(strstr(h.reason, "KVM_GET_API_VERSION"));
    unsetenv("MOAT_KVM_DEV");
}
END_TEST

START_TEST(info_sizes)
{
    ck_assert_int_eq(moat_host_info(NULL), -22);
    struct moat_host_info h;
    memset(&h, 0xa5, sizeof h);
    h.size = offsetof(struct moat_host_info, kind) - 1;
    ck_assert_int_eq(moat_host_info(&h), -22);
    /* A caller built against the original five fields: nothing past them
     * is written. */
    memset(&h, 0xa5, sizeof h);
    h.size = offsetof(struct moat_host_info, kind);
    setenv("MOAT_KVM_DEV", "/nonexistent/kvm", 1);
    ck_assert_int_eq(moat_host_info(&h), 0);
    unsetenv("MOAT_KVM_DEV");
    ck_assert_uint_eq(h.size, offsetof(struct moat_host_info, kind));
    ck_assert_int_eq(h.kvm_available, 0);
    const unsigned char *tail = (const unsigned char *)&h + offsetof(struct moat_host_info, kind);
    for (size_t i = 0; i < sizeof h - offsetof(struct moat_host_info, kind); i++)
        ck_assert_uint_eq(tail[i], 0xa5);
    /* A caller built against a newer, larger struct: what this library
     * does not know is zeroed, size kept. */
    _Alignas(16) unsigned char big[sizeof(struct moat_host_info) + 64];
    memset(big, 0xa5, sizeof big);
    struct moat_host_info *hb = (struct moat_host_info *)big;
    hb->size = sizeof big;
    setenv("MOAT_KVM_DEV", "/nonexistent/kvm", 1);
    ck_assert_int_eq(moat_host_info(hb), 0);
    unsetenv("MOAT_KVM_DEV");
    ck_assert_uint_eq(hb->size, sizeof big);
    ck_assert_int_eq(hb->kind, MOAT_HOST_NONE);
    for (size_t i = sizeof(struct moat_host_info); i < sizeof big; i++)
        ck_assert_uint_eq(big[i], 0);
}
END_TEST

START_TEST(pvm_override_reason)
{
    char why[128];
    setenv("MOAT_FORCE_PVM", "1", 1);
    ck_assert(kvm_host_detect_pvm_why(why, sizeof why));
    ck_assert_str_eq(why, "MOAT_FORCE_PVM=1");
    setenv("MOAT_FORCE_PVM", "0", 1);
    ck_assert(!kvm_host_detect_pvm_why(why, sizeof why));
    ck_assert(!kvm_host_detect_pvm_why(NULL, 0));
    setenv("MOAT_FORCE_PVM", "10", 1);      /* not an override: the real probe answers */
    kvm_host_detect_pvm_why(why, sizeof why);
    ck_assert_ptr_null(strstr(why, "MOAT_FORCE_PVM"));
    unsetenv("MOAT_FORCE_PVM");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("host");
    TCase *tc = tcase_create("probe");
    tcase_add_test(tc, flags_whole_words);
    tcase_add_test(tc, flags_amd_and_odd_input);
    tcase_add_test(tc, classify_kinds);
    tcase_add_test(tc, kind_names);
    tcase_add_test(tc, info_without_kvm_device);
    tcase_add_test(tc, info_sizes);
    tcase_add_test(tc, pvm_override_reason);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
