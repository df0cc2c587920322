# Fuzzing (included by the top Makefile). See docs/fuzzing.md.
#
#   make fuzz               build every tests/fuzz/fuzz_X.c with clang + libFuzzer
#                           (ASan/UBSan) into build/fuzz/fuzz_X
#   make fuzz-run           run each for FUZZ_SECONDS (default 30) on its corpus
#                           tests/fuzz/corpus/X/ (new inputs go to build/fuzz/corpus/X/)
#   make test-fuzz-replay   build build/tests/replay_X (gcc + ASan/UBSan + Check):
#                           one test per corpus file, fails on an empty corpus; run them
#   make fuzz-seeds         regenerate the hand-made seeds (deterministic)
#   make test-fuzz-ci       make test's fuzzing: every target for FUZZ_CI_RUNS (100000)
#                           executions, 2 at a time, within FUZZ_CI_BUDGET (300) seconds
#                           (tests/fuzz/ci.sh); SKIPPED without clang's libFuzzer
#
# Every tests/fuzz/fuzz_*.c defines LLVMFuzzerTestOneInput and is picked up by
# wildcard; it may use any library source (they are all linked in, as an archive).

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 30
FUZZ_ARGS    ?=
FUZZ_SRCS    := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES   := $(FUZZ_SRCS:tests/fuzz/fuzz_%.c=%)
FUZZ_BINS    := $(FUZZ_NAMES:%=$(B)/fuzz/fuzz_%)
FUZZ_OBJS    := $(LIB_SRCS:%.c=$(B)/fuzz/obj/%.o) $(CLI_LIB_SRCS:%.c=$(B)/fuzz/obj/%.o)
REPLAY_BINS  := $(FUZZ_NAMES:%=$(B)/tests/replay_%)
FUZZ_SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# Library code is built by clang here; clang-only warnings stay warnings so a
# new clang diagnostic in someone's device does not break the fuzz build.
FUZZ_CFLAGS  := $(CFLAGS_COMMON) -O1 -g -MMD -MP -DMOAT_FUZZING=1

.PHONY: fuzz fuzz-run fuzz-seeds fuzz-snapshot-seeds test-fuzz-replay test-fuzz-ci

fuzz: $(FUZZ_BINS)

$(B)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -c $< -o $@

$(B)/fuzz/libmoat-fuzz.a: $(FUZZ_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BINS): $(B)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(B)/fuzz/libmoat-fuzz.a
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(B)/fuzz/libmoat-fuzz.a $(LDLIBS)

fuzz-run: $(FUZZ_BINS)
	@set -e; for n in $(FUZZ_NAMES); do \
	    mkdir -p $(B)/fuzz/corpus/$$n $(B)/fuzz/artifacts tests/fuzz/corpus/$$n; \
	    echo "== fuzz_$$n for $(FUZZ_SECONDS)s"; \
	    $(B)/fuzz/fuzz_$$n -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	        -artifact_prefix=$(B)/fuzz/artifacts/$$n- $(FUZZ_ARGS) \
	        $(B)/fuzz/corpus/$$n tests/fuzz/corpus/$$n; \
	done

# In make test (the fuzz layer): only where clang can link a libFuzzer
# program (Debian: clang + libclang-rt-14-dev).
test-fuzz-ci:
	@if printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' | \
	    $(FUZZ_CC) -x c -fsanitize=fuzzer -o /dev/null - >/dev/null 2>&1; then \
	    $(MAKE) --no-print-directory fuzz && B=$(B) tests/fuzz/ci.sh; \
	else echo "SKIPPED: fuzz-ci: $(FUZZ_CC) cannot link -fsanitize=fuzzer (scripts/deps.sh installs clang and libclang-rt-14-dev)"; fi

# Replay: the same targets, built with gcc + ASan/UBSan against the sanitizer
# library, driven by Check (tests/fuzz/replay_main.c).
$(REPLAY_BINS): $(B)/tests/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay_main.c $(B)/libmoat-san.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(SAN_FLAGS) $(CHECK_CFLAGS) -DFUZZ_NAME='"$*"' \
	    -DFUZZ_CORPUS_DIR='"$(CURDIR)/tests/fuzz/corpus/$*"' \
	    -o $@ $< tests/fuzz/replay_main.c $(B)/libmoat-san.a $(CHECK_LIBS) $(LDLIBS)

# The gzip decoder's target links zlib (vmm/api/e2b/gz_stream.c), and so does
# gen_seeds, which deflates that target's seeds.
$(B)/fuzz/fuzz_gz_stream $(B)/tests/replay_gz_stream: LDLIBS += $(ZLIB_LIBS)

test-fuzz-replay: $(REPLAY_BINS)
	tests/run-unit.sh $(REPLAY_BINS)

$(B)/fuzz/gen_seeds: tests/fuzz/gen_seeds.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_COMMON) -O1 -o $@ $< $(ZLIB_LIBS)

fuzz-seeds: $(B)/fuzz/gen_seeds
	$(B)/fuzz/gen_seeds tests/fuzz/corpus

# The snapshot target's corpus: real snapshots (needs /dev/kvm).
$(B)/fuzz/gen_snapshot_seeds: tests/fuzz/gen_snapshot_seeds.c $(B)/libmoat.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(B)/libmoat.a $(LDLIBS)

fuzz-snapshot-seeds: $(B)/fuzz/gen_snapshot_seeds $(B)/guests/counter.elf
	@set -e; t=$$(mktemp -d); mkdir -p $$t/a $$t/b tests/fuzz/corpus/snapshot; \
	$(B)/fuzz/gen_snapshot_seeds $$t/a $(B)/guests/counter.elf; \
	$(B)/fuzz/gen_snapshot_seeds $$t/b $(B)/guests/counter.elf devices; \
	cp $$t/a/full.state tests/fuzz/corpus/snapshot/full; cp $$t/a/diff.state tests/fuzz/corpus/snapshot/diff; \
	cp $$t/b/full.state tests/fuzz/corpus/snapshot/full-drive-vsock; \
	cp $$t/b/diff.state tests/fuzz/corpus/snapshot/diff-drive-vsock; rm -rf $$t

-include $(FUZZ_OBJS:.o=.d) $(REPLAY_BINS:=.d)
