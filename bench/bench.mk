# Benchmark helpers (included by the top-level Makefile).
$(B)/bench/runstat: bench/runstat.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<

$(B)/bench/tiny.elf: bench/guest/tiny.S bench/guest/pvh.inc bench/guest/tiny.ld
	@mkdir -p $(dir $@)
	as --64 -I bench/guest $< -o $(B)/bench/tiny.o
	ld -m elf_x86_64 -z max-page-size=4096 -T bench/guest/tiny.ld -o $@ $(B)/bench/tiny.o

.PHONY: bench-tools
bench-tools: $(B)/bench/runstat $(B)/bench/tiny.elf $(B)/bench/wait.elf

# Guest-side block benchmark (bench/vhost-blk.sh): a static binary, packed
# as a second cpio that is appended to the guest's initramfs.
$(B)/bench/blkbench: bench/guest/blkbench.c
	@mkdir -p $(dir $@)
	$(CC) -static -O2 -Wall -Wextra -Werror -o $@ $<

$(B)/bench/blkbench.cpio: $(B)/bench/blkbench tests/nested/mkcpio.sh
	rm -rf $(B)/bench/blkbench.root && mkdir -p $(B)/bench/blkbench.root
	cp $< $(B)/bench/blkbench.root/blkbench
	sh tests/nested/mkcpio.sh $(B)/bench/blkbench.root $@

bench-tools: $(B)/bench/blkbench.cpio

# The host's TSC rate, for bench/net.sh's QEMU TCG guests (tsc_early_khz=).
$(B)/bench/tsc_khz: bench/tsc_khz.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -Wextra -Werror -o $@ $<

bench-tools: $(B)/bench/tsc_khz

# `make bench` also runs these (each prints SKIPPED when it cannot run here).
.PHONY: bench-blk bench-exec bench-net bench-restore
bench-blk: all guest bench-tools
	sh bench/vhost-blk.sh
bench-exec: all guest test-guests bench-tools
	sh bench/exec.sh
bench-net: all guest bench-tools
	sh bench/net.sh
bench-restore: all test-guests
	bash bench/restore.sh
bench: bench-blk bench-exec bench-net bench-restore

$(B)/bench/wait.elf: bench/guest/wait.S bench/guest/pvh.inc bench/guest/tiny.ld
	@mkdir -p $(dir $@)
	as --64 -I bench/guest $< -o $(B)/bench/wait.o
	ld -m elf_x86_64 -z max-page-size=4096 -T bench/guest/tiny.ld -o $@ $(B)/bench/wait.o

# Guest RAM in a file or anonymous: fault and stop-write costs (issue 14,
# item 3; docs/snapshot-format.md). Uses the snapshot writer itself.
$(B)/bench/ram-backing: bench/ram-backing.c $(B)/libmoat-internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libmoat-internal.a $(LDLIBS)
