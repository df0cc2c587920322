# The default guest: kernel (bzImage + vmlinux) and initramfs.
# Included by the top-level Makefile, which defines B. See docs/guest.md.
#
#   make guest      build $(GUEST_KERNEL), $(GUEST_VMLINUX), $(GUEST_INITRD)
#
# Each output is rebuilt only when its inputs change: the kernel on the
# config fragment, the build/check scripts or the source tarball; the
# initramfs on /init, busybox, the rootfs files or its script.

GUEST_DIR      := $(B)/guest
GUEST_KERNEL   := $(GUEST_DIR)/bzImage
GUEST_VMLINUX  := $(GUEST_DIR)/vmlinux
GUEST_INITRD   := $(GUEST_DIR)/initramfs.cpio
GUEST_INIT     := $(GUEST_DIR)/init
GUEST_KSRC_TAR ?= /usr/src/linux-source-6.1.tar.xz
GUEST_KSRC     := $(GUEST_DIR)/linux-6.1
GUEST_BUSYBOX  ?= /bin/busybox
GUEST_JOBS     ?= 2
GUEST_ROOTFS   := $(sort $(shell find guest/rootfs -type f 2>/dev/null))
GUEST_INIT_CFLAGS := -std=gnu11 -O2 -static -s -Wall -Wextra -Werror -Wshadow

.PHONY: guest guest-clean
guest: $(GUEST_KERNEL) $(GUEST_VMLINUX) $(GUEST_INITRD)

$(GUEST_KSRC)/.moat-extracted: $(GUEST_KSRC_TAR)
	guest/kernel/build.sh --extract $(GUEST_KSRC_TAR) $(GUEST_DIR)
	touch $@

$(GUEST_KERNEL) $(GUEST_VMLINUX) &: guest/kernel/moat.config guest/kernel/build.sh \
		guest/kernel/check-config.sh $(GUEST_KSRC)/.moat-extracted
	guest/kernel/build.sh $(GUEST_KSRC_TAR) guest/kernel/moat.config $(GUEST_DIR) $(GUEST_JOBS)

$(GUEST_INIT): guest/init/init.c
	@mkdir -p $(dir $@)
	$(CC) $(GUEST_INIT_CFLAGS) -o $@ $<

$(GUEST_DIR)/gen_init_cpio: $(GUEST_KSRC)/.moat-extracted
	$(CC) -O2 -o $@ $(GUEST_KSRC)/usr/gen_init_cpio.c

$(GUEST_INITRD): $(GUEST_INIT) $(GUEST_BUSYBOX) $(GUEST_DIR)/gen_init_cpio \
		guest/mkinitramfs.sh $(GUEST_ROOTFS)
	guest/mkinitramfs.sh $@ $(GUEST_INIT) $(GUEST_BUSYBOX) $(GUEST_DIR)/gen_init_cpio guest/rootfs

guest-clean:
	rm -rf $(GUEST_DIR)
