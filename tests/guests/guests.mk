# Test guests (tests/guests/*.c) and the integration test program.
# Included by the top-level Makefile; uses its B, CC, VERSION, CHECK_CFLAGS,
# CHECK_LIBS, CFLAGS_COMMON.
#
#   make test-guests                 build every guest into $(B)/guests/NAME.elf
#   make $(B)/tests/test_integration the Check program that runs them
#
# See docs/testing.md.

GUEST_DIR     := tests/guests
GUEST_SRCS    := $(sort $(wildcard $(GUEST_DIR)/*.c))
GUEST_NAMES   := $(GUEST_SRCS:$(GUEST_DIR)/%.c=%)
GUEST_ELFS    := $(GUEST_NAMES:%=$(B)/guests/%.elf)
GUEST_RT_OBJS := $(B)/guests/rt/start.o $(B)/guests/rt/rt.o
GUEST_LDS     := $(GUEST_DIR)/rt/guest.ld
GUEST_HDRS    := $(GUEST_DIR)/rt/rt.h $(GUEST_DIR)/rt/virtio_mmio.h $(GUEST_DIR)/expect.h

GUEST_CC     ?= gcc
GUEST_CFLAGS := -std=gnu11 -ffreestanding -fno-pic -no-pie -nostdlib -static \
                -mgeneral-regs-only -mno-red-zone -fno-stack-protector -O2 \
                -Wall -Wextra -Werror -fno-asynchronous-unwind-tables \
                -fno-tree-loop-distribute-patterns -fcf-protection=none \
                -I$(GUEST_DIR) -I$(GUEST_DIR)/rt
GUEST_LDFLAGS := -Wl,-T,$(GUEST_LDS) -Wl,--build-id=none -z max-page-size=4096 \
                 -z noexecstack

.PHONY: test-guests
.SECONDARY: $(GUEST_RT_OBJS)
test-guests: $(GUEST_ELFS)

$(B)/guests/rt/%.o: $(GUEST_DIR)/rt/%.S
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(GUEST_CFLAGS) -c $< -o $@

$(B)/guests/rt/%.o: $(GUEST_DIR)/rt/%.c $(GUEST_HDRS)
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(GUEST_CFLAGS) -c $< -o $@

$(B)/guests/%.elf: $(GUEST_DIR)/%.c $(GUEST_RT_OBJS) $(GUEST_LDS) $(GUEST_HDRS)
	@mkdir -p $(dir $@)
	$(GUEST_CC) $(GUEST_CFLAGS) $(GUEST_LDFLAGS) -o $@ $(GUEST_RT_OBJS) $<

# The integration test: a normal hosted Check program (no libmoat; it runs
# the moat binary). Explicit, so the tests/unit pattern rule does not apply.
$(B)/tests/test_integration: tests/integration/test_integration.c tests/integration/host_probe.h tests/integration/harness.h tests/integration/rm_tree.h $(GUEST_DIR)/expect.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(CHECK_LIBS)

# virtio-blk through moat (tests/integration/test_blk.c; docs/devices.md).
$(B)/tests/test_blk: tests/integration/test_blk.c tests/integration/host_probe.h tests/integration/harness.h $(GUEST_DIR)/expect.h $(GUEST_DIR)/blk_proto.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(CHECK_LIBS)

# virtio-vsock through moat (tests/integration/test_vsock.c; docs/vsock.md).
$(B)/tests/test_vsock: tests/integration/test_vsock.c tests/integration/host_probe.h tests/integration/harness.h $(GUEST_DIR)/vsock_proto.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(CHECK_LIBS)

# The guest agent and moat exec/cp on the host, over a Unix socket (no KVM):
# tests/integration/test_agent.c; docs/agent-protocol.md.
$(B)/tests/test_agent: tests/integration/test_agent.c vmm/agent/agent_proto.c vmm/agent/agent_proto.h \
		vmm/agent/agent_client.c vmm/agent/agent_client.h vmm/base/clock.c vmm/base/fullio.c \
		$(B)/guest/agent $(B)/moat
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< vmm/agent/agent_proto.c \
	    vmm/agent/agent_client.c vmm/base/clock.c vmm/base/fullio.c $(CHECK_LIBS)

$(B)/guests/net.elf: $(GUEST_DIR)/net_proto.h

# virtio-net through moat and a TAP in a network namespace
# (tests/integration/test_net.c; docs/testing.md).
$(B)/tests/test_net: tests/integration/test_net.c tests/integration/host_probe.h tests/integration/harness.h $(GUEST_DIR)/expect.h $(GUEST_DIR)/net_proto.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(CHECK_LIBS)

$(B)/guests/vhostile.elf: $(GUEST_DIR)/hostile_proto.h

# The hostile-guest suite: tests/guests/vhostile.c against virtio-blk and
# virtio-vsock through moat (tests/integration/test_hostile.c; docs/testing.md).
$(B)/tests/test_hostile: tests/integration/test_hostile.c tests/integration/host_probe.h tests/integration/harness.h $(GUEST_DIR)/expect.h $(GUEST_DIR)/hostile_proto.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(CHECK_LIBS)
$(B)/guests/rng.elf: $(GUEST_DIR)/rng_proto.h

# The page-fault handler for restores with a uffd memory backend
# (tests/integration/uffd_handler.c; docs/uffd.md).
$(B)/tests/uffd_handler: tests/integration/uffd_handler.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) $(CFLAGS) -o $@ $< $(shell pkg-config --cflags --libs jansson 2>/dev/null || echo -ljansson)
