# The default guest: kernel (bzImage + vmlinux) and initramfs.
# Included by the top-level Makefile, which defines B. See docs/guest.md.
#
#   make guest      build $(GUEST_KERNEL), $(GUEST_VMLINUX), $(GUEST_INITRD)
#
# Each output is rebuilt only when its inputs change: the kernel on the
# config fragment, the build/check scripts or the source tarball; the
# initramfs on /init, busybox, the rootfs files or its script.
#
# Internal variables are prefixed DGUEST_ ("default guest") so they cannot
# clash with tests/guests/guests.mk's GUEST_*; recipes use only DGUEST_*
# and automatic variables, since they are expanded after every makefile is
# read. Public: GUEST_KERNEL, GUEST_VMLINUX, GUEST_INITRD.

DGUEST_OUT      := $(B)/guest
DGUEST_KSRC_TAR ?= /usr/src/linux-source-6.1.tar.xz
DGUEST_KSRC     := $(DGUEST_OUT)/linux-6.1
DGUEST_BUSYBOX  ?= /bin/busybox
DGUEST_JOBS     ?= 2
DGUEST_ROOTFS   := $(sort $(shell find guest/rootfs -type f 2>/dev/null))
DGUEST_INIT     := $(DGUEST_OUT)/init
DGUEST_GENCPIO  := $(DGUEST_OUT)/gen_init_cpio
DGUEST_CFLAGS   := -std=gnu11 -O2 -static -s -Wall -Wextra -Werror -Wshadow

GUEST_KERNEL    := $(DGUEST_OUT)/bzImage
GUEST_VMLINUX   := $(DGUEST_OUT)/vmlinux
GUEST_INITRD    := $(DGUEST_OUT)/initramfs.cpio

.PHONY: guest guest-clean
guest: $(DGUEST_OUT)/bzImage $(DGUEST_OUT)/vmlinux $(DGUEST_OUT)/initramfs.cpio

$(DGUEST_KSRC)/.moat-extracted: $(DGUEST_KSRC_TAR)
	guest/kernel/build.sh --extract $< $(DGUEST_OUT)
	touch $@

$(DGUEST_OUT)/bzImage $(DGUEST_OUT)/vmlinux &: guest/kernel/moat.config guest/kernel/build.sh \
		guest/kernel/check-config.sh $(DGUEST_KSRC)/.moat-extracted
	guest/kernel/build.sh $(DGUEST_KSRC_TAR) $< $(DGUEST_OUT) $(DGUEST_JOBS)

$(DGUEST_INIT): guest/init/init.c guest/init/netcfg.c guest/init/netcfg.h guest/init/imgcfg.c guest/init/imgcfg.h
	@mkdir -p $(dir $@)
	$(CC) $(DGUEST_CFLAGS) -o $@ guest/init/init.c guest/init/netcfg.c guest/init/imgcfg.c

# The HTTP client (guest/tools/fetch.c, docs/guest.md "Network"): static,
# with its own name lookup (no glibc NSS).
DGUEST_FETCH    := $(DGUEST_OUT)/moat-fetch
$(DGUEST_FETCH): guest/tools/fetch.c guest/tools/fetch_parse.c guest/tools/fetch_parse.h
	@mkdir -p $(dir $@)
	$(CC) $(DGUEST_CFLAGS) -o $@ guest/tools/fetch.c guest/tools/fetch_parse.c

# The guest agent (guest/agent/agent.c, docs/agent-protocol.md): static, so
# it runs in the initramfs and, for tests, on the host too.
DGUEST_AGENT    := $(DGUEST_OUT)/agent
$(DGUEST_AGENT): guest/agent/agent.c vmm/agent/agent_proto.c vmm/agent/agent_proto.h
	@mkdir -p $(dir $@)
	$(CC) $(DGUEST_CFLAGS) -I. -o $@ guest/agent/agent.c vmm/agent/agent_proto.c

$(DGUEST_GENCPIO): $(DGUEST_KSRC)/.moat-extracted
	$(CC) -O2 -o $@ $(DGUEST_KSRC)/usr/gen_init_cpio.c

$(DGUEST_OUT)/initramfs.cpio: guest/mkinitramfs.sh $(DGUEST_INIT) $(DGUEST_BUSYBOX) \
		$(DGUEST_GENCPIO) $(DGUEST_ROOTFS) $(DGUEST_AGENT) $(DGUEST_FETCH)
	$< $@ $(DGUEST_INIT) $(DGUEST_BUSYBOX) $(DGUEST_GENCPIO) guest/rootfs \
	    /sbin/moat-agent=$(DGUEST_AGENT) /bin/moat-fetch=$(DGUEST_FETCH)

guest-clean:
	rm -rf $(DGUEST_OUT)

# Guest disk images (docs/guest.md, "Disk images").
.PHONY: rootfs-debian
rootfs-debian:
	guest/images/rootfs-debian.sh $(DGUEST_OUT)
