# moat — top-level build.
#
#   make            build build/moat, build/libmoat.a, build/libmoat.so
#   make run        install deps, build moat and the default guest, run it
#   make test       install deps, build everything, run every test
#   make guest      build the default guest (kernel + initramfs)
#   make bench      run the benchmarks (see docs/BENCHMARKS.md)
#
# Sources are picked up by wildcard: a new .c file in a folder of vmm/ (but
# vmm/cli/, vmm/api/ and vmm/sandbox/), of devices/, or in boot/ joins the
# library; a new one under vmm/api/ joins the API servers and one under
# vmm/sandbox/ the sandbox layer (CLI and tests only); tests/unit/test_*.c
# each become one Check binary. The folders are the layers
# (docs/architecture.md, "Layers"; tests/includes.sh checks them).

VERSION   := 0.1.0
B         := build
CC        ?= gcc
CFLAGS_COMMON := -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
                 -Wformat=2 -Wvla -fno-strict-aliasing -D_GNU_SOURCE \
                 -DMOAT_VERSION='"$(VERSION)"' -Iinclude -I.
CFLAGS    ?= -O2 -g
ALL_CFLAGS = $(CFLAGS_COMMON) $(CFLAGS) -fPIC -MMD -MP
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDLIBS    := -lpthread -lm -lxxhash -lseccomp

# Optional libraries are detected, not assumed, so `make` works before deps.
HAVE_URING := $(shell pkg-config --exists liburing 2>/dev/null && echo 1)
ifeq ($(HAVE_URING),1)
  CFLAGS_COMMON += -DMOAT_HAVE_URING=1
  LDLIBS += $(shell pkg-config --libs liburing)
endif
# libjansson is required, not optional (JSON: the metadata service's
# document, devices/net/mmds.c; rate-limiter configs,
# devices/virtio/ratelimit_json.c). Without it only `make deps` (which installs
# libjansson-dev), `make run`, `make test` (they run deps first, then build
# in a new make) and `make clean` go on.
HAVE_JANSSON := $(shell pkg-config --exists jansson 2>/dev/null && echo 1)
ifeq ($(HAVE_JANSSON),1)
  CFLAGS_COMMON += $(shell pkg-config --cflags jansson)
  LDLIBS += $(shell pkg-config --libs jansson)
else
  LDLIBS += -ljansson
  ifeq ($(filter deps run test clean,$(MAKECMDGOALS)),)
    $(error libjansson-dev is required and pkg-config does not find jansson: run `make deps` (scripts/deps.sh) or `apt-get install libjansson-dev`)
  endif
endif
# Nettle (nettle-dev) is required: SHA-256 for a disk overlay's base
# identity (devices/blk/overlay_disk.c; docs/disk-overlay.md). A plain
# library with no global state, no configuration files and no allocation
# (it runs in seccomp-filtered and chrooted processes). Same rule as
# libjansson.
HAVE_NETTLE := $(shell pkg-config --exists nettle 2>/dev/null && echo 1)
ifeq ($(HAVE_NETTLE),1)
  CFLAGS_COMMON += $(shell pkg-config --cflags nettle)
  LDLIBS += $(shell pkg-config --libs nettle)
else
  LDLIBS += -lnettle
  ifeq ($(filter deps run test clean,$(MAKECMDGOALS)),)
    $(error nettle-dev is required and pkg-config does not find nettle: run `make deps` (scripts/deps.sh) or `apt-get install nettle-dev`)
  endif
endif
# libmicrohttpd is required too: the Firecracker-compatible API's HTTP
# server (`moat vmm`, vmm/api/firecracker/; docs/control-api.md) and moat
# serve. Same rule as libjansson: only deps, run, test and clean go on
# without it. Its header is needed at build time; the library itself is
# loaded by vmm/api/mhd_dyn.c when a server starts (it pulls in GnuTLS and
# nine more libraries, which every other moat process would load for
# nothing), by the soname of the one built against. Never in libmoat.
HAVE_MHD := $(shell pkg-config --exists libmicrohttpd 2>/dev/null && echo 1)
ifneq ($(HAVE_MHD),1)
  ifeq ($(filter deps run test clean,$(MAKECMDGOALS)),)
    $(error libmicrohttpd-dev is required and pkg-config does not find libmicrohttpd: run `make deps` (scripts/deps.sh) or `apt-get install libmicrohttpd-dev`)
  endif
endif
MHD_SONAME := $(shell objdump -p $$(pkg-config --variable=libdir libmicrohttpd 2>/dev/null || echo /usr/lib)/libmicrohttpd.so 2>/dev/null | sed -n 's/^ *SONAME *//p')
MHD_SONAME := $(or $(MHD_SONAME),libmicrohttpd.so.12)
# libcurl (the registry client, vmm/image/registry.c): the same, loaded by
# vmm/image/curl_dyn.c when a pull starts, by the soname of the one built
# against; only its header is needed at build time (libcurl4-openssl-dev).
CURL_SONAME := $(shell objdump -p $$(pkg-config --variable=libdir libcurl 2>/dev/null || echo /usr/lib)/libcurl.so 2>/dev/null | sed -n 's/^ *SONAME *//p')
CURL_SONAME := $(or $(CURL_SONAME),libcurl.so.4)
MHD_LIBS :=
# zlib is required too: `moat serve`'s envd decodes Content-Encoding: gzip
# uploads (vmm/api/e2b/serve_envd.c; docs/serve.md). Same rule as libmicrohttpd;
# it travels with MHD_LIBS, so only what links the envd server gets it, and
# the gzip decoder's own tests and fuzz target (vmm/api/e2b/gz_stream.c; below).
HAVE_ZLIB := $(shell pkg-config --exists zlib 2>/dev/null && echo 1)
ZLIB_LIBS := $(if $(HAVE_ZLIB),$(shell pkg-config --libs zlib),-lz)
MHD_LIBS += $(ZLIB_LIBS)
ifeq ($(HAVE_ZLIB)$(filter deps run test clean,$(MAKECMDGOALS)),)
  $(error zlib1g-dev is required and pkg-config does not find zlib: run `make deps` (scripts/deps.sh) or `apt-get install zlib1g-dev`)
endif
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

# The API servers (vmm/api/: Firecracker's API, the E2B server; above the
# library, below the CLI), picked up by wildcard one and two folders deep.
API_SRCS := $(sort $(wildcard vmm/api/*.c vmm/api/*/*.c))
# The sandbox layer (vmm/sandbox/: named sandboxes as a library; moat.h has
# no API for it yet).
SANDBOX_SRCS := $(sort $(wildcard vmm/sandbox/*.c))
# Container images (vmm/image/: references, store, registry client, root
# filesystems; below the sandbox layer). libcurl, libarchive and libext2fs
# are dlopen'ed when first used, not linked: linked, they cost every moat
# process their loading (docs/images.md).
IMAGE_SRCS := $(sort $(wildcard vmm/image/*.c))
# The sonames vmm/image/archive_dyn.c and ext2fs_dyn.c load (the
# libraries' own, read off the .so files built against).
ARCHIVE_SONAME := $(shell objdump -p $$(pkg-config --variable=libdir libarchive 2>/dev/null || echo /usr/lib)/libarchive.so 2>/dev/null | sed -n 's/^ *SONAME *//p')
ARCHIVE_SONAME := $(or $(ARCHIVE_SONAME),libarchive.so.13)
EXT2FS_SONAME := $(shell objdump -p $$(pkg-config --variable=libdir ext2fs 2>/dev/null || echo /usr/lib)/libext2fs.so 2>/dev/null | sed -n 's/^ *SONAME *//p')
EXT2FS_SONAME := $(or $(EXT2FS_SONAME),libext2fs.so.2)
CLI_SRCS := $(sort $(wildcard vmm/cli/*.c))
# The sandbox layer and the API servers: in the internal archives (the CLI
# and the tests link those), never in libmoat.a / libmoat.so.
CLI_LIB_SRCS := $(IMAGE_SRCS) $(SANDBOX_SRCS) $(API_SRCS)
LIB_SRCS := $(filter-out $(CLI_SRCS) $(CLI_LIB_SRCS),$(sort $(wildcard vmm/*/*.c devices/*/*.c boot/*.c)))
LIB_OBJS := $(LIB_SRCS:%.c=$(B)/obj/%.o)
CLI_OBJS := $(CLI_SRCS:%.c=$(B)/obj/%.o)
CLI_LIB_OBJS := $(CLI_LIB_SRCS:%.c=$(B)/obj/%.o)
SAN_LIB_OBJS := $(LIB_SRCS:%.c=$(B)/san/%.o) $(CLI_LIB_SRCS:%.c=$(B)/san/%.o)
SAN_CLI_OBJS := $(CLI_SRCS:%.c=$(B)/san/%.o)

UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(B)/tests/%)
UNIT_SAN_BINS := $(UNIT_SRCS:tests/unit/%.c=$(B)/tests-san/%)
UNIT_COMMON := $(filter-out $(UNIT_SRCS),$(wildcard tests/unit/*.c))

.PHONY: all deps serve-deps print-ldlibs run test test-unit test-san test-integration test-load test-durability test-linux test-vhost test-nested test-serve guest bench clean fuzz
all: $(B)/moat $(B)/libmoat.a $(B)/libmoat.so $(B)/moat-san

deps:
	@scripts/deps.sh

# The E2B SDK of the serve tests: npm ci in tests/serve from its
# package-lock.json (e2b 2.51.0); SKIPPED without node >= 20.18.1.
serve-deps:
	@scripts/serve-deps.sh

# The soname mhd_dyn.c loads (the library's own, read off the .so).
$(B)/obj/vmm/api/mhd_dyn.o $(B)/san/vmm/api/mhd_dyn.o: CFLAGS += -DMHD_SONAME='"$(MHD_SONAME)"'
$(B)/obj/vmm/image/curl_dyn.o $(B)/san/vmm/image/curl_dyn.o: CFLAGS += -DCURL_SONAME='"$(CURL_SONAME)"'
$(B)/obj/vmm/image/archive_dyn.o $(B)/san/vmm/image/archive_dyn.o: CFLAGS += -DARCHIVE_SONAME='"$(ARCHIVE_SONAME)"'
$(B)/obj/vmm/image/ext2fs_dyn.o $(B)/san/vmm/image/ext2fs_dyn.o: CFLAGS += -DEXT2FS_SONAME='"$(EXT2FS_SONAME)"'
$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(B)/san/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) -c $< -o $@

# Every object with every symbol: the CLI and the unit tests, which reach
# inside.
$(B)/libmoat-internal.a: $(LIB_OBJS) $(CLI_LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# libmoat.a for embedders: one relocatable object whose only global symbols
# are the functions vmm/libmoat.map exports (moat.h's); every internal name
# is local, so it cannot clash with the embedder's (tests/symbols.sh checks).
$(B)/libmoat.a: $(LIB_OBJS) vmm/libmoat.map
	@mkdir -p $(dir $@)
	grep -o 'moat_[a-z0-9_]*' vmm/libmoat.map | sort -u > $(B)/libmoat.syms
	$(LD) -r -o $(B)/libmoat-api.o $(LIB_OBJS)
	objcopy --keep-global-symbols=$(B)/libmoat.syms $(B)/libmoat-api.o
	rm -f $@ && ar rcs $@ $(B)/libmoat-api.o

$(B)/libmoat-san.a: $(SAN_LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(B)/libmoat.so: $(LIB_OBJS) vmm/libmoat.map
	$(CC) -shared -Wl,-soname,libmoat.so.0 -Wl,--version-script=vmm/libmoat.map -o $@ $(LIB_OBJS) $(LDLIBS)

$(B)/moat: $(CLI_OBJS) $(B)/libmoat-internal.a
	$(CC) -o $@ $(CLI_OBJS) $(B)/libmoat-internal.a $(LDLIBS) $(MHD_LIBS)

# The sanitizer build of the CLI; integration tests run it too.
$(B)/moat-san: $(SAN_CLI_OBJS) $(B)/libmoat-san.a
	$(CC) $(SAN_FLAGS) -o $@ $(SAN_CLI_OBJS) $(B)/libmoat-san.a $(LDLIBS) $(MHD_LIBS)

$(B)/tests/%: tests/unit/%.c $(UNIT_COMMON) $(B)/libmoat-internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(UNIT_COMMON) $(B)/libmoat-internal.a $(CHECK_LIBS) $(LDLIBS)

$(B)/tests-san/%: tests/unit/%.c $(UNIT_COMMON) $(B)/libmoat-san.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) $(CHECK_CFLAGS) -o $@ $< $(UNIT_COMMON) $(B)/libmoat-san.a $(CHECK_LIBS) $(LDLIBS)

# The gzip decoder's unit tests link zlib (the other tests do not need it).
$(B)/tests/test_gz_stream $(B)/tests-san/test_gz_stream: LDLIBS += $(ZLIB_LIBS)
# The root filesystem's tests write layers with libarchive and read the
# ext4 back with libext2fs, linked (moat itself loads them on first use).
$(B)/tests/test_image_rootfs $(B)/tests-san/test_image_rootfs: LDLIBS += -larchive -lext2fs -lcom_err

# Sub-makefiles: the guest image, test guests, fuzz targets, benchmarks.
-include guest/guest.mk
-include tests/guests/guests.mk
-include tests/fuzz/fuzz.mk
-include bench/bench.mk

# The libraries a program linking libmoat.a needs (tests/nested's checks).
print-ldlibs:
	@echo $(LDLIBS)

run: deps
	$(MAKE) all guest
	scripts/run.sh

# make test: everything, layer by layer (tests/layers.sh: every layer runs,
# each is timed, and a table of times and pass/fail/skip counts ends the
# output); fails if any layer fails.
TEST_LAYERS := build:all,guest,test-guests,examples unit:test-unit san:test-san \
               fuzz:test-fuzz-replay,test-fuzz-ci integration:test-integration linux:test-linux \
               load:test-load,test-durability vhost:test-vhost nested:test-nested
test: deps
	@MAKE="$(MAKE)" tests/layers.sh $(TEST_LAYERS)

test-unit: $(UNIT_BINS) $(B)/libmoat.so $(B)/libmoat.a
	tests/run-unit.sh $(UNIT_BINS)
	LDLIBS="$(LDLIBS)" tests/symbols.sh $(B)/libmoat.so include/moat.h $(B)/libmoat.a
	tests/includes.sh
	tests/contracts.sh
	tests/funclen_test.sh
	tests/funclen.sh

test-san: $(UNIT_SAN_BINS)
	tests/run-unit.sh $(UNIT_SAN_BINS)

# libmoat through its public header (two VMs in one process, stop, exit fd).
$(B)/tests/test_api: tests/integration/test_api.c tests/guests/expect.h tests/integration/host_probe.h tests/integration/rm_tree.h $(B)/libmoat.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(B)/libmoat.a $(CHECK_LIBS) $(LDLIBS)

# Load and lifetime (20 VMs in one process and as 20 processes, 1000
# create/start/stop/destroy cycles with fds and RSS flat): tests/integration/test_load.c.
$(B)/tests/test_load: tests/integration/test_load.c tests/guests/expect.h tests/integration/harness.h tests/integration/host_probe.h $(B)/libmoat.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -o $@ $< $(B)/libmoat.a $(CHECK_LIBS) $(LDLIBS)

test-load: $(B)/moat test-guests $(B)/tests/test_load
	MOAT_GUESTS=$(B)/guests MOAT_BIN=$(B)/moat $(B)/tests/test_load

# 200 SIGKILLs during flushed writes through virtio-blk, then 200 through a
# copy-on-write overlay (tests/integration/blk-durability.sh): no
# acknowledged record lost, the overlay opens after every kill. Where
# /dev/kvm cannot run the test guests, the nested suite's test_blk kills 3
# times each way instead.
DURABILITY_RUNS ?= 200
test-durability: $(B)/moat test-guests $(B)/tests/test_blk
	@kind=$$(scripts/host-kind.sh); if [ "$$kind" = none ]; then \
	    echo "SKIPPED: durability: no usable /dev/kvm here (kind $$kind); the nested suite's test_blk kills 3 times each way"; \
	else tests/integration/blk-durability.sh $(DURABILITY_RUNS) && \
	     tests/integration/blk-durability.sh --overlay $(DURABILITY_RUNS); fi

$(B)/tests-san/test_api: tests/integration/test_api.c tests/guests/expect.h tests/integration/host_probe.h tests/integration/rm_tree.h $(B)/libmoat-san.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) $(CHECK_CFLAGS) -o $@ $< $(B)/libmoat-san.a $(CHECK_LIBS) $(LDLIBS)

# moat serve's envd server in-process against the guest agent run on the
# host (tests/integration/test_serve_envd.c).
SERVE_ENVD_TEST := tests/integration/test_serve_envd.c
$(B)/tests/test_serve_envd: $(SERVE_ENVD_TEST) $(B)/libmoat-internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -o $@ $(SERVE_ENVD_TEST) $(B)/libmoat-internal.a $(CHECK_LIBS) $(LDLIBS) $(MHD_LIBS)

$(B)/tests-san/test_serve_envd: $(SERVE_ENVD_TEST) $(B)/libmoat-san.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) $(CHECK_CFLAGS) -o $@ $(SERVE_ENVD_TEST) $(B)/libmoat-san.a $(CHECK_LIBS) $(LDLIBS) $(MHD_LIBS)

# Layer files -> an ext4 root filesystem (tests/integration/image-rootfs.sh,
# bench/image.sh).
$(B)/tests/image_rootfs: tests/integration/image_rootfs.c $(B)/libmoat-internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

# The envd server on its own for the e2b SDK (tests/integration/serve-envd-sdk.sh).
$(B)/tests/serve_envd_host: tests/integration/serve_envd_host.c $(B)/libmoat-internal.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS) $(MHD_LIBS)

test-integration: $(B)/moat $(B)/moat-san test-guests guest $(B)/tests/test_integration $(B)/tests/uffd_handler $(B)/tests/test_api $(B)/tests-san/test_api $(B)/tests/test_blk $(B)/tests/test_vsock $(B)/tests/test_net $(B)/tests/test_agent $(B)/tests/test_hostile \
                  $(B)/tests/test_serve_envd $(B)/tests-san/test_serve_envd $(B)/tests/serve_envd_host serve-deps \
                  $(B)/tests/image_rootfs
	@rc=0; for bin in $(B)/moat $(B)/moat-san; do \
	    MOAT_BIN=$$bin MOAT_GUESTS=$(B)/guests $(B)/tests/test_integration || rc=1; \
	    MOAT_BIN=$$bin MOAT_GUESTS=$(B)/guests $(B)/tests/test_blk || rc=1; \
	    MOAT_BIN=$$bin MOAT_GUESTS=$(B)/guests $(B)/tests/test_vsock || rc=1; \
	    MOAT_BIN=$$bin MOAT_GUESTS=$(B)/guests $(B)/tests/test_net || rc=1; \
	    MOAT_BIN=$$bin MOAT_GUESTS=$(B)/guests $(B)/tests/test_hostile || rc=1; \
	    MOAT_BIN=$$bin $(B)/tests/test_agent || rc=1; \
	    MOAT_BIN=$$bin MOAT_GUESTS=$(B)/guests tests/integration/fc-api.sh || rc=1; \
	    MOAT_BIN=$$bin MOAT_GUESTS=$(B)/guests tests/integration/serve-api.sh || rc=1; \
	    MOAT_BIN=$$bin tests/integration/image-store.sh || rc=1; \
	    MOAT_BIN=$$bin tests/integration/image-pull.sh || rc=1; \
	    MOAT_BIN=$$bin tests/integration/image-run.sh || rc=1; \
	    MOAT_BIN=$$bin tests/integration/image-e2e.sh || rc=1; \
	    MOAT_BIN=$$bin B=$(B) tests/integration/image-rootfs.sh || rc=1; \
	done; \
	for t in $(B)/tests/test_api $(B)/tests-san/test_api; do \
	    MOAT_GUESTS=$(B)/guests $$t || rc=1; \
	done; \
	for t in $(B)/tests/test_serve_envd $(B)/tests-san/test_serve_envd; do \
	    MOAT_AGENT=$(B)/guest/agent $$t || rc=1; \
	done; \
	B=$(B) tests/integration/serve-envd-sdk.sh || rc=1; \
	MOAT_BIN=$(B)/moat MOAT_GUESTS=$(B)/guests tests/integration/jail.sh || rc=1; \
	exit $$rc

test-linux: $(B)/moat guest
	tests/linux/run.sh

# moat's devices served over vhost-user to QEMU (TCG): Linux's driver
# does mkfs/mount/write/sync through virtio-blk (tests/vhost/run.sh), and
# through a copy-on-write overlay (tests/vhost/overlay.sh); exec and cp
# through vsock and the agent (tests/vhost/vsock.sh); ping, TCP and the
# metadata service through virtio-net on a TAP in a namespace of the test's
# own (tests/vhost/net.sh, root); DHCP through passt, the egress policy's
# allow, deny and domain rules and their counters, and the host's loopback
# with and without host_loopback, between two namespaces of the test's own
# (tests/vhost/net-user.sh, root, passt).
test-vhost: $(B)/moat guest
	tests/vhost/run.sh
	tests/vhost/overlay.sh
	tests/vhost/vsock.sh
	tests/vhost/net.sh
	tests/vhost/net-user.sh

# The KVM suites and the Linux user-space checks inside a Linux that QEMU
# emulates with SVM (TCG), on hosts the probe calls pvm or none
# (tests/nested/README.md); on hardware KVM the same checks run directly.
test-nested: all examples test-guests guest $(B)/tests/test_integration $(B)/tests/test_load $(B)/tests/uffd_handler $(B)/tests/test_api $(B)/tests-san/test_api $(B)/tests/test_blk $(B)/tests/test_vsock $(B)/tests/test_net $(B)/tests/test_hostile serve-deps
	@if [ "$$(scripts/host-kind.sh)" = kvm ] && [ -z "$(MOAT_FORCE_NESTED)" ]; then \
	    echo "nested: hardware KVM here: the same checks run directly on it"; \
	    tests/nested/test-moat.sh --native; \
	else tests/nested/test-moat.sh --timeout 2400 --mem 6144; fi

# moat serve driven by the real E2B SDK (tests/serve/run.sh), directly on
# this host where Linux guests run (hardware KVM). make test runs the same
# script as the nested check serve-e2b (tests/nested/checks.d/serve.sh): in
# L1 on pvm/none hosts, directly on kvm hosts (test-moat.sh --native).
test-serve: $(B)/moat guest serve-deps
	@kind=$$(scripts/host-kind.sh); if [ "$$kind" = kvm ]; then tests/serve/run.sh; \
	else echo "SKIPPED: serve: Linux guests do not run on this host (kind $$kind); make test-nested runs the serve checks in its L1"; fi

bench: all guest test-guests
	bench/boot.sh

clean:
	rm -rf $(B)/obj $(B)/san $(B)/tests $(B)/tests-san $(B)/moat $(B)/moat-san $(B)/libmoat.* $(B)/libmoat-* $(B)/guests $(B)/fuzz

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(CLI_LIB_OBJS:.o=.d) $(SAN_LIB_OBJS:.o=.d) $(SAN_CLI_OBJS:.o=.d)

# examples/: small programs against the public header and libmoat.a.
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLES := $(EXAMPLE_SRCS:examples/%.c=$(B)/examples/%)
.PHONY: examples
examples: $(EXAMPLES)
$(B)/examples/%: examples/%.c include/moat.h $(B)/libmoat.a
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -Wall -Wextra -Werror -O2 -Iinclude -o $@ $< $(B)/libmoat.a $(LDLIBS)
