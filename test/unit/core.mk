# test/unit/core.mk — unit tests of the allocator core, one program per
# module (test/unit/test_<module>.c): sizeclass, pagemap, pageheap,
# pagerelease (the release policy, and malloc_trim's release of the central
# lists' free pages), large (large blocks and realloc in place), central,
# tcache, alloc (the malloc family and invalid frees), stats, prof_sampler,
# prof_sites (the sampled-page flags),
# fmt, options, os_linux.  What they share is in core_test.h.
# Included by the top Makefile, which provides BUILD, CC, PM_CFLAGS,
# CMOCKA_LIBS and PM_TEST_A (the allocator without the libc overrides: the
# tests call pm_* directly and themselves run on the C library's malloc).

CORE_TEST_NAMES := sizeclass pagemap pageheap pagerelease large central tcache alloc stats prof_sampler prof_sites fmt \
	options os_linux
CORE_TESTS := $(CORE_TEST_NAMES:%=$(BUILD)/test/test_%)
CORE_TEST_HDRS := $(wildcard src/*.h) include/profmalloc.h test/unit/core_test.h test/unit/child_stderr.h

$(CORE_TESTS): $(BUILD)/test/test_%: test/unit/test_%.c $(CORE_TEST_HDRS) $(PM_TEST_A)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(CMOCKA_CFLAGS) $< -o $@ $(PM_TEST_A) $(CMOCKA_LIBS) -lm -pthread

.PHONY: check-core
CHECK_TARGETS += check-core
check-core: $(CORE_TESTS)
	@rc=0; for t in $(CORE_TESTS); do timeout -k 5 60 $$t || rc=1; done; exit $$rc

# Opt-in: the same unit tests with the whole core built under ASan and
# UBSan (the core is tested through pm_*, never as the interposer, so the
# sanitizers' own malloc stays in charge of the process).
SAN_DIR := $(BUILD)/san
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_OBJS := $(CORE_SRCS:src/%.c=$(SAN_DIR)/%.o)
SAN_TESTS := $(CORE_TEST_NAMES:%=$(SAN_DIR)/test_%)

$(SAN_DIR)/%.o: src/%.c $(CORE_TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(filter-out -fvisibility=hidden,$(PM_CFLAGS)) -O1 $(SAN_FLAGS) -c $< -o $@
$(SAN_DIR)/mark_begin.o: src/textmark.c
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -c $< -o $@
$(SAN_DIR)/mark_end.o: src/textmark.c
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -DPM_TEXT_END -c $< -o $@
$(SAN_DIR)/core.o: $(SAN_DIR)/mark_begin.o $(SAN_OBJS) $(SAN_DIR)/mark_end.o
	$(LD) -r -o $@ $^
$(SAN_TESTS): $(SAN_DIR)/test_%: test/unit/test_%.c $(CORE_TEST_HDRS) $(SAN_DIR)/core.o
	$(CC) $(PM_CFLAGS) $(SAN_FLAGS) $(CMOCKA_CFLAGS) $< -o $@ $(SAN_DIR)/core.o $(CMOCKA_LIBS) -lm -pthread

.PHONY: check-sanitize
check-sanitize: $(SAN_TESTS)
	@rc=0; for t in $(SAN_TESTS); do ASAN_OPTIONS=detect_leaks=0 timeout -k 5 120 $$t || rc=1; done; exit $$rc

# Opt-in: ThreadSanitizer.  test_core is too slow under it (the page heap's
# tests); test/unit/tsan_stress.c runs threads against pm_* in ten mixes
# instead.  test/unit/tsan.supp names the reads the code makes without a
# lock on purpose; any other race fails the run.  Its entries match the
# reader's stack, which TSan restores only while the history holds it: at
# history_size=4 mode dump failed 1 run in 3 with "[failed to restore the
# stack]" on the stats reader, at 7 none in 9.  Builds the core in
# $(BUILD)/tsan with the rules above.
TSAN_MODES := prodcons churn realloc trim sample1 samplesmall dump fork large all
$(SAN_DIR)/tsan_stress: test/unit/tsan_stress.c $(SAN_DIR)/core.o
	$(CC) $(PM_CFLAGS) $(SAN_FLAGS) $< -o $@ $(SAN_DIR)/core.o -lm -pthread

.PHONY: check-tsan
check-tsan:
	+@$(MAKE) --no-print-directory SAN_DIR=$(BUILD)/tsan \
		SAN_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" $(BUILD)/tsan/tsan_stress
	@rc=0; for m in $(TSAN_MODES); do \
		if TSAN_OPTIONS="halt_on_error=1 history_size=7 suppressions=$(CURDIR)/test/unit/tsan.supp" \
			timeout -k 5 300 $(BUILD)/tsan/tsan_stress $$m 2>$(BUILD)/tsan/$$m.log; \
		then echo "PASS tsan_stress $$m"; \
		else rc=1; echo "FAIL tsan_stress $$m ($(BUILD)/tsan/$$m.log):"; tail -n 40 $(BUILD)/tsan/$$m.log; fi; \
	done; exit $$rc
