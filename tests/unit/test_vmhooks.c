/* Lifecycle hooks (vmm/core/vmhooks.c): the order of the calls, an error
 * stopping its step, two VMs keeping their own hooks, the core calling
 * them (vm_create, vm_free), and the snapshot layer's record that
 * moat_create gives every VM. Needs no KVM: nothing here opens /dev/kvm. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/moat.h"
#include "vmm/core/vm.h"
#include "vmm/core/vmhooks.h"
#include "vmm/snapshot/snapvm.h"

/* What the hooks did, in order: "A.start B.start ..." */
struct trace {
    char s[1024];
};

/* One hook's record: its name in the trace, and what it returns. */
struct rec {
    const char *name;
    struct trace *t;
    struct moat_vm *vm;         /* the VM it was registered with */
    int fail_mem, fail_start, fail_refused;
    uint32_t flags;
    int destroyed;
};

static void note(struct rec *r, struct moat_vm *vm, const char *what)
{
    ck_assert_ptr_eq(vm, r->vm);        /* called for its own VM only */
    size_t n = strlen(r->t->s);
    snprintf(r->t->s + n, sizeof r->t->s - n, "%s%s.%s", n ? " " : "", r->name, what);
}

static int h_mem(struct moat_vm *vm, void *ctx, uint32_t *fl)
{
    struct rec *r = ctx;
    note(r, vm, "mem");
    *fl |= r->flags;
    return r->fail_mem;
}

static int h_refused(struct moat_vm *vm, void *ctx)
{
    struct rec *r = ctx;
    note(r, vm, "refused");
    return r->fail_refused;
}

static void h_restored(struct moat_vm *vm, void *ctx, unsigned slot)
{
    char w[32];
    snprintf(w, sizeof w, "restored%u", slot);
    note(ctx, vm, w);
}

static int h_start(struct moat_vm *vm, void *ctx)
{
    struct rec *r = ctx;
    note(r, vm, "start");
    return r->fail_start;
}

static void h_paused(struct moat_vm *vm, void *ctx) { note(ctx, vm, "paused"); }
static void h_stopped(struct moat_vm *vm, void *ctx) { note(ctx, vm, "stopped"); }
static void h_release(struct moat_vm *vm, void *ctx) { note(ctx, vm, "release"); }

static void h_destroy(struct moat_vm *vm, void *ctx)
{
    struct rec *r = ctx;
    note(r, vm, "destroy");
    r->destroyed++;
}

static const struct vm_hook_ops ops_a = {
    .name = "A", .mem_setup = h_mem, .mem_refused = h_refused, .restored = h_restored, .start = h_start,
    .paused = h_paused, .stopped = h_stopped, .release = h_release, .destroy = h_destroy,
};
static const struct vm_hook_ops ops_b = ops_a;      /* same calls, another table: another layer */
static const struct vm_hook_ops ops_c = { .name = "C" };  /* no hooks at all: skipped */

/* A VM as vm_alloc makes one: no KVM objects, no threads (seccomp off). */
static struct moat_vm *new_vm(void)
{
    struct moat_vm *vm = NULL;
    struct moat_error err;
    ck_assert_int_eq(vm_alloc(&vm, 1, 2 << 20, -1, -1, 0, 0, &err), 0);
    ck_assert_ptr_nonnull(vm);
    ck_assert_uint_eq(vm->nhooks, 0);
    return vm;
}

START_TEST(order_of_calls)
{
    struct moat_vm *vm = new_vm();
    struct trace t = { "" };
    struct rec a = { .name = "A", .t = &t, .vm = vm, .flags = 1 }, b = { .name = "B", .t = &t, .vm = vm, .flags = 4 };
    ck_assert_int_eq(vm_hooks_add(vm, &ops_a, &a), 0);
    ck_assert_int_eq(vm_hooks_add(vm, &ops_c, NULL), 0);
    ck_assert_int_eq(vm_hooks_add(vm, &ops_b, &b), 0);
    ck_assert_ptr_eq(vm_hook_ctx(vm, &ops_a), &a);
    ck_assert_ptr_eq(vm_hook_ctx(vm, &ops_b), &b);
    uint32_t fl = 0;
    ck_assert_int_eq(vm_hooks_mem_setup(vm, &fl), 0);
    ck_assert_uint_eq(fl, 5);                       /* both asked: or-ed */
    ck_assert_int_eq(vm_hooks_mem_refused(vm), 0);
    vm_hooks_restored(vm, 3);
    ck_assert_int_eq(vm_hooks_start(vm), 0);
    vm_hooks_paused(vm);
    vm_hooks_stopped(vm);
    /* set-up in registration order, tear-down in reverse */
    ck_assert_str_eq(t.s, "A.mem B.mem B.refused A.refused A.restored3 B.restored3 A.start B.start "
                          "A.paused B.paused B.stopped A.stopped");
    t.s[0] = 0;
    vm_free(vm);            /* release first, destroy last, both in reverse */
    ck_assert_str_eq(t.s, "B.release A.release B.destroy A.destroy");
    ck_assert_int_eq(a.destroyed, 1);
    ck_assert_int_eq(b.destroyed, 1);
}
END_TEST

START_TEST(error_stops_the_step)
{
    struct moat_vm *vm = new_vm();
    struct trace t = { "" };
    struct rec a = { .name = "A", .t = &t, .vm = vm, .fail_mem = -EIO, .fail_start = -EPERM, .fail_refused = -EINVAL };
    struct rec b = { .name = "B", .t = &t, .vm = vm, .flags = 4 };
    ck_assert_int_eq(vm_hooks_add(vm, &ops_a, &a), 0);
    ck_assert_int_eq(vm_hooks_add(vm, &ops_b, &b), 0);
    uint32_t fl = 0;
    ck_assert_int_eq(vm_hooks_mem_setup(vm, &fl), -EIO);
    ck_assert_str_eq(t.s, "A.mem");                 /* B's not called */
    ck_assert_uint_eq(fl, 0);
    t.s[0] = 0;
    ck_assert_int_eq(vm_hooks_start(vm), -EPERM);
    ck_assert_str_eq(t.s, "A.start");
    t.s[0] = 0;
    /* reverse order: B can do without the flags, A cannot */
    ck_assert_int_eq(vm_hooks_mem_refused(vm), -EINVAL);
    ck_assert_str_eq(t.s, "B.refused A.refused");
    b.fail_refused = -ENOTSUP;
    t.s[0] = 0;
    ck_assert_int_eq(vm_hooks_mem_refused(vm), -ENOTSUP);
    ck_assert_str_eq(t.s, "B.refused");
    t.s[0] = 0;
    vm_free(vm);
    ck_assert_str_eq(t.s, "B.release A.release B.destroy A.destroy");
}
END_TEST

START_TEST(two_vms_keep_their_own)
{
    struct moat_vm *v1 = new_vm(), *v2 = new_vm();
    struct trace t1 = { "" }, t2 = { "" };
    struct rec a1 = { .name = "A", .t = &t1, .vm = v1 }, b2 = { .name = "B", .t = &t2, .vm = v2 };
    struct rec a2 = { .name = "A2", .t = &t2, .vm = v2 };
    ck_assert_int_eq(vm_hooks_add(v1, &ops_a, &a1), 0);
    ck_assert_int_eq(vm_hooks_add(v2, &ops_b, &b2), 0);
    ck_assert_int_eq(vm_hooks_add(v2, &ops_a, &a2), 0);     /* the same table, its own ctx */
    ck_assert_ptr_eq(vm_hook_ctx(v1, &ops_a), &a1);
    ck_assert_ptr_eq(vm_hook_ctx(v2, &ops_a), &a2);
    ck_assert_ptr_null(vm_hook_ctx(v1, &ops_b));
    ck_assert_int_eq(vm_hooks_start(v1), 0);
    ck_assert_str_eq(t1.s, "A.start");
    ck_assert_str_eq(t2.s, "");
    ck_assert_int_eq(vm_hooks_start(v2), 0);
    ck_assert_str_eq(t2.s, "B.start A2.start");
    ck_assert_str_eq(t1.s, "A.start");
    vm_free(v1);
    ck_assert_int_eq(a1.destroyed, 1);
    ck_assert_int_eq(a2.destroyed + b2.destroyed, 0);     /* v2's untouched */
    ck_assert_int_eq(vm_hooks_start(v2), 0);
    vm_free(v2);
    ck_assert_int_eq(a2.destroyed, 1);
    ck_assert_int_eq(b2.destroyed, 1);
}
END_TEST

START_TEST(add_refusals)
{
    struct moat_vm *vm = new_vm();
    static const struct vm_hook_ops more[VM_MAX_HOOKS] = { { .name = "1" }, { .name = "2" }, { .name = "3" },
                                                           { .name = "4" } };
    ck_assert_int_eq(vm_hooks_add(NULL, &more[0], NULL), -EINVAL);
    ck_assert_int_eq(vm_hooks_add(vm, NULL, NULL), -EINVAL);
    ck_assert_int_eq(vm_hooks_add(vm, &more[0], NULL), 0);
    ck_assert_int_eq(vm_hooks_add(vm, &more[0], NULL), -EEXIST);
    for (unsigned i = 1; i < VM_MAX_HOOKS; i++)
        ck_assert_int_eq(vm_hooks_add(vm, &more[i], NULL), 0);
    ck_assert_int_eq(vm_hooks_add(vm, &ops_c, NULL), -ENOSPC);
    ck_assert_uint_eq(vm->nhooks, VM_MAX_HOOKS);
    vm_free(vm);
}
END_TEST

/* vm_create calls attach once the VM exists, before anything that can
 * fail on the configuration's files; a failure afterwards tears the hooks
 * down with the VM. An attach that fails stops the creation. */
struct attach_arg {
    struct rec *r;
    int calls, fail;
};

static int attach(struct moat_vm *vm, void *arg)
{
    struct attach_arg *a = arg;
    a->calls++;
    a->r->vm = vm;
    if (a->fail)
        return a->fail;
    return vm_hooks_add(vm, &ops_a, a->r);
}

START_TEST(create_attaches_and_tears_down)
{
    struct moat_config cfg;
    moat_config_init(&cfg);
    cfg.kernel = "/nonexistent/moat-test-kernel";
    struct trace t = { "" };
    struct rec r = { .name = "A", .t = &t };
    struct attach_arg aa = { .r = &r };
    struct moat_vm *vm = (struct moat_vm *)1;
    struct moat_error err;
    ck_assert_int_eq(vm_create(&cfg, &vm, &err, attach, &aa), -ENOENT);
    ck_assert_msg(strstr(err.msg, "/nonexistent/moat-test-kernel"), "%s", err.msg);
    ck_assert_int_eq(aa.calls, 1);
    ck_assert_str_eq(t.s, "A.release A.destroy");   /* torn down with the VM */
    ck_assert_int_eq(r.destroyed, 1);
    /* an attach that fails: the creation stops with its error */
    struct attach_arg bad = { .r = &r, .fail = -ENOMEM };
    t.s[0] = 0;
    ck_assert_int_eq(vm_create(&cfg, &vm, &err, attach, &bad), -ENOMEM);
    ck_assert_str_eq(err.msg, "out of memory");
    ck_assert_int_eq(bad.calls, 1);
    ck_assert_str_eq(t.s, "");                      /* nothing registered, nothing called */
}
END_TEST

/* The snapshot layer's record: one per VM, reached through the VM's
 * hooks, freed with it. */
START_TEST(snapshot_record_per_vm)
{
    struct moat_vm *v1 = new_vm(), *v2 = new_vm();
    struct snapvm *s1 = NULL, *s2 = NULL;
    ck_assert_ptr_null(snapvm_of(v1));
    ck_assert_int_eq(snapvm_attach(v1, false, &s1), 0);
    ck_assert_int_eq(snapvm_attach(v2, true, &s2), 0);
    ck_assert_ptr_nonnull(s1);
    ck_assert_ptr_ne(s1, s2);
    ck_assert_ptr_eq(snapvm_of(v1), s1);
    ck_assert_ptr_eq(snapvm_of(v2), s2);
    ck_assert(!s1->restoring && s2->restoring);
    ck_assert_int_eq(s1->uffd, -1);
    ck_assert_int_eq(s1->uffd_sock, -1);
    ck_assert_int_eq(snapvm_attach(v1, false, NULL), -EEXIST);   /* one record per VM */
    ck_assert_ptr_eq(snapvm_of(v1), s1);
    vm_free(v1);            /* frees s1 (the sanitizer build sees a leak otherwise) */
    ck_assert_ptr_eq(snapvm_of(v2), s2);
    vm_free(v2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vmhooks");
    TCase *tc = tcase_create("vmhooks");
    tcase_add_test(tc, order_of_calls);
    tcase_add_test(tc, error_stops_the_step);
    tcase_add_test(tc, two_vms_keep_their_own);
    tcase_add_test(tc, add_refusals);
    tcase_add_test(tc, create_attaches_and_tears_down);
    tcase_add_test(tc, snapshot_record_per_vm);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
