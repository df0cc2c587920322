#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/core/kvm.h"

static struct kvm_cpuid_entry2 ent(uint32_t fn, uint32_t idx, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    struct kvm_cpuid_entry2 e;
    memset(&e, 0, sizeof(e));
    e.function = fn; e.index = idx; e.eax = a; e.ebx = b; e.ecx = c; e.edx = d;
    return e;
}

START_TEST(apic_ids_and_hypervisor_bit)
{
    struct kvm_cpuid_entry2 e[3] = {
        ent(1, 0, 0x806f8, 0xff0a0800, (1u << 5) | (1u << 23), 0),
        ent(0xb, 0, 1, 1, 0x100, 0x77),
        ent(0xb, 1, 4, 2, 0x201, 0x77),
    };
    cpuid_filter(e, 3, 5, 8, false);
    ck_assert_uint_eq(e[0].ebx >> 24, 5);
    ck_assert_uint_eq((e[0].ebx >> 16) & 0xff, 8);
    ck_assert_uint_eq(e[0].ebx & 0xffff, 0x0800);          /* brand/clflush kept */
    ck_assert(e[0].ecx & (1u << 31));                       /* hypervisor */
    ck_assert(!(e[0].ecx & (1u << 5)));                     /* no VMX */
    ck_assert(e[0].ecx & (1u << 23));                       /* popcnt kept off PVM */
    ck_assert(e[0].edx & (1u << 28));                       /* HTT with >1 CPU */
    ck_assert_uint_eq(e[1].edx, 5);
    ck_assert_uint_eq(e[2].edx, 5);
}
END_TEST

START_TEST(no_pmu_no_svm)
{
    struct kvm_cpuid_entry2 e[2] = {
        ent(0xa, 0, 0x08300805, 1, 2, 3),
        ent(0x80000001, 0, 0, 0, (1u << 2) | 1, (1u << 27)),
    };
    cpuid_filter(e, 2, 0, 1, false);
    ck_assert_uint_eq(e[0].eax | e[0].ebx | e[0].ecx | e[0].edx, 0);
    ck_assert_uint_eq(e[1].ecx, 1);
    ck_assert_uint_eq(e[1].edx, 1u << 27);                  /* rdtscp kept off PVM */
}
END_TEST

START_TEST(pvm_clears_ring0_failures)
{
    uint32_t l1c = (1u << 13) | (1u << 17) | (1u << 23) | (1u << 26) | (1u << 27) | (1u << 0);
    uint32_t l7b = (1u << 0) | (1u << 7) | (1u << 10) | (1u << 20) | (1u << 3);
    struct kvm_cpuid_entry2 e[4] = {
        ent(1, 0, 0, 0, l1c, 0),
        ent(7, 0, 0, l7b, (1u << 22) | 1, 0),
        ent(0x80000001, 0, 0, 0, 0, (1u << 27) | 1),
        ent(0xd, 0, 7, 0x240, 0x340, 0),
    };
    cpuid_filter(e, 4, 0, 1, true);
    ck_assert_uint_eq(e[0].ecx & ~(1u << 31), 1u);          /* only SSE3 left */
    ck_assert_uint_eq(e[1].ebx, 1u << 3);                    /* BMI1 kept */
    ck_assert_uint_eq(e[1].ecx, 1u);
    ck_assert_uint_eq(e[2].edx, 1u);
    ck_assert_uint_eq(e[3].eax | e[3].ebx | e[3].ecx, 0);
    ck_assert_uint_eq(e[0].edx & (1u << 28), 0);            /* one CPU: no HTT */
}
END_TEST

START_TEST(pvm_cmdline_names_features_by_number)
{
    int found_noxsave = 0, found_clear = 0;
    for (const char *const *p = pvm_cmdline_extras; *p; p++) {
        if (!strcmp(*p, "noxsave")) found_noxsave = 1;
        if (!strncmp(*p, "clearcpuid=", 11)) {
            found_clear = 1;
            /* popcnt 4*32+23, cx16 4*32+13, rdpid 16*32+22 */
            ck_assert_ptr_nonnull(strstr(*p, "151"));
            ck_assert_ptr_nonnull(strstr(*p, "141"));
            ck_assert_ptr_nonnull(strstr(*p, "534"));
        }
    }
    ck_assert(found_noxsave && found_clear);
}
END_TEST

START_TEST(pvm_detect_override)
{
    setenv("MOAT_FORCE_PVM", "1", 1);
    ck_assert(kvm_host_detect_pvm());
    setenv("MOAT_FORCE_PVM", "0", 1);
    ck_assert(!kvm_host_detect_pvm());
    unsetenv("MOAT_FORCE_PVM");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpuid");
    TCase *tc = tcase_create("filter");
    tcase_add_test(tc, apic_ids_and_hypervisor_bit);
    tcase_add_test(tc, no_pmu_no_svm);
    tcase_add_test(tc, pvm_clears_ring0_failures);
    tcase_add_test(tc, pvm_cmdline_names_features_by_number);
    tcase_add_test(tc, pvm_detect_override);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
