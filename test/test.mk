# test/test.mk — API conformance, stress and integration tests, included by
# the top Makefile.  Uses BUILD, CC, CMOCKA_LIBS, PM_SO and PM_A.
#
#   check-api          test/api/test_api.c: linked with -lprofmalloc, and a
#                      plain build run with LD_PRELOAD
#   check-stress       test/stress/test_stress.c: the same two ways
#   check-integration  test/integration/linked.c against the .so and the .a
#                      (and -static), installed.sh (make install + pkg-config;
#                      the recipe is marked "+" so that make shares its jobs),
#                      deepbind.c (a plugin opened with RTLD_DEEPBIND),
#                      then test/integration/run.sh (real programs with and
#                      without LD_PRELOAD)
#
# The tests are compiled with flags of their own (not PM_CFLAGS), and with
# -fno-builtin so the compiler keeps every allocation call they make.
# Binaries linked with the shared library find it through the relocatable
# rpath $ORIGIN/.. (they live in $(BUILD)/test/).

TEST_CFLAGS := -std=gnu11 -O1 -g -Wall -Wextra -D_GNU_SOURCE -Iinclude -pthread
# (-fno-builtin whole: clang folds valloc(SIZE_MAX) == NULL to false even with
# -fno-builtin-valloc.)
TEST_NOBUILTIN := -fno-builtin
TEST_DIR := $(BUILD)/test
TEST_LINK_PM := -L$(BUILD) -Wl,--no-as-needed -lprofmalloc -Wl,--as-needed -Wl,-rpath,'$$ORIGIN/..'
TEST_PRELOAD := LD_PRELOAD=$(abspath $(PM_SO)) PM_TEST_REQUIRE_PROFMALLOC=1
TEST_TIMEOUT := timeout -k 5

TEST_BINS := $(TEST_DIR)/test_api_linked $(TEST_DIR)/test_api_plain \
             $(TEST_DIR)/test_stress_linked $(TEST_DIR)/test_stress_plain \
             $(TEST_DIR)/linked_so $(TEST_DIR)/linked_static $(TEST_DIR)/preload_check \
             $(TEST_DIR)/linked_fully_static $(TEST_DIR)/linked_fully_static_gold $(TEST_DIR)/linked_nohdr \
             $(TEST_DIR)/deepbind_plain $(TEST_DIR)/deepbind_linked

# ---- API conformance ---------------------------------------------------------
$(TEST_DIR)/test_api_linked: test/api/test_api.c include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) -DPM_TEST_LINKED $< -o $@ $(TEST_LINK_PM) $(CMOCKA_LIBS)

$(TEST_DIR)/test_api_plain: test/api/test_api.c include/profmalloc.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) $< -o $@ $(CMOCKA_LIBS)

# ---- stress ------------------------------------------------------------------
$(TEST_DIR)/test_stress_linked: test/stress/test_stress.c include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) -DPM_TEST_LINKED $< -o $@ $(TEST_LINK_PM) $(CMOCKA_LIBS)

$(TEST_DIR)/test_stress_plain: test/stress/test_stress.c include/profmalloc.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) $< -o $@ $(CMOCKA_LIBS)

# ---- integration -------------------------------------------------------------
$(TEST_DIR)/linked_so: test/integration/linked.c include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) $< -o $@ $(TEST_LINK_PM)

$(TEST_DIR)/linked_static: test/integration/linked.c include/profmalloc.h $(PM_A)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) -DLINK_STATIC $< -o $@ $(PM_A)

# cc -static: libc allocates in its own start-up, before any constructor
$(TEST_DIR)/linked_fully_static: test/integration/linked.c include/profmalloc.h $(PM_A)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) -DLINK_STATIC -DLINK_FULLY_STATIC -static $< -o $@ $(PM_A)

# gold writes .eh_frame with its own section type
$(TEST_DIR)/linked_fully_static_gold: test/integration/linked.c include/profmalloc.h $(PM_A)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) -DLINK_STATIC -DLINK_FULLY_STATIC -static -fuse-ld=gold $< -o $@ $(PM_A)

# a dynamic program without .eh_frame_hdr, also run as `ld.so ./program`
$(TEST_DIR)/linked_nohdr: test/integration/linked.c include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) -Wl,--no-eh-frame-hdr $< -o $@ $(TEST_LINK_PM)

# a plugin opened with RTLD_DEEPBIND, found through the program's RUNPATH
$(TEST_DIR)/deepbind/libpm_deepbind_plug.so: test/integration/deepbind_plug.c
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) -fPIC -shared $< -o $@

TEST_DEEPBIND_RUNPATH := -Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN/deepbind'
$(TEST_DIR)/deepbind_plain: test/integration/deepbind.c $(TEST_DIR)/deepbind/libpm_deepbind_plug.so
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) $< -o $@ $(TEST_DEEPBIND_RUNPATH) -ldl

$(TEST_DIR)/deepbind_linked: test/integration/deepbind.c $(TEST_DIR)/deepbind/libpm_deepbind_plug.so $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) $< -o $@ $(TEST_DEEPBIND_RUNPATH) $(TEST_LINK_PM) -ldl

$(TEST_DIR)/preload_check: test/integration/preload_check.c include/profmalloc.h
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $< -o $@

# ---- check targets -----------------------------------------------------------
.PHONY: check-api check-stress check-integration test-programs
CHECK_TARGETS += check-api check-stress check-integration

test-programs: $(TEST_BINS)

# Each recipe runs all of its variants, then fails if any of them failed.
check-api: $(TEST_DIR)/test_api_linked $(TEST_DIR)/test_api_plain
	@rc=0; \
	echo "== test_api, linked with -lprofmalloc"; \
	$(TEST_TIMEOUT) 60 $(TEST_DIR)/test_api_linked || rc=1; \
	echo "== test_api, LD_PRELOAD"; \
	$(TEST_PRELOAD) $(TEST_TIMEOUT) 60 $(TEST_DIR)/test_api_plain || rc=1; \
	exit $$rc

check-stress: $(TEST_DIR)/test_stress_linked $(TEST_DIR)/test_stress_plain
	@rc=0; \
	echo "== test_stress, linked with -lprofmalloc"; \
	$(TEST_TIMEOUT) 60 $(TEST_DIR)/test_stress_linked || rc=1; \
	echo "== test_stress, LD_PRELOAD"; \
	$(TEST_PRELOAD) $(TEST_TIMEOUT) 60 $(TEST_DIR)/test_stress_plain || rc=1; \
	exit $$rc

check-integration: $(TEST_DIR)/linked_so $(TEST_DIR)/linked_static $(TEST_DIR)/linked_fully_static \
		$(TEST_DIR)/linked_fully_static_gold $(TEST_DIR)/linked_nohdr $(TEST_DIR)/preload_check $(PM_SO) \
		$(TEST_DIR)/deepbind_plain $(TEST_DIR)/deepbind_linked
	+@rc=0; \
	echo "== linked.c against the shared library"; \
	$(TEST_TIMEOUT) 30 $(TEST_DIR)/linked_so || rc=1; \
	echo "== linked.c against the static archive"; \
	$(TEST_TIMEOUT) 30 $(TEST_DIR)/linked_static || rc=1; \
	echo "== linked.c as a fully static executable, every allocation sampled from the start"; \
	PROFMALLOC_SAMPLE_RATE=1 $(TEST_TIMEOUT) 30 $(TEST_DIR)/linked_fully_static || rc=1; \
	echo "== the same, linked by gold"; \
	PROFMALLOC_SAMPLE_RATE=1 $(TEST_TIMEOUT) 30 $(TEST_DIR)/linked_fully_static_gold || rc=1; \
	echo "== linked.c without .eh_frame_hdr, run directly and as ld.so ./linked_nohdr"; \
	PROFMALLOC_SAMPLE_RATE=1 $(TEST_TIMEOUT) 30 $(TEST_DIR)/linked_nohdr || rc=1; \
	PROFMALLOC_SAMPLE_RATE=1 $(TEST_TIMEOUT) 30 $$($(CC) -print-file-name=ld-linux-x86-64.so.2) \
		$(TEST_DIR)/linked_nohdr || rc=1; \
	echo "== a plugin opened with RTLD_DEEPBIND: LD_PRELOAD, -lprofmalloc, glibc alone; dlmopen; PROFMALLOC_KEEP_DEEPBIND=1"; \
	$(TEST_PRELOAD) $(TEST_TIMEOUT) 30 $(TEST_DIR)/deepbind_plain || rc=1; \
	PM_TEST_REQUIRE_PROFMALLOC=1 $(TEST_TIMEOUT) 30 $(TEST_DIR)/deepbind_linked || rc=1; \
	$(TEST_TIMEOUT) 30 $(TEST_DIR)/deepbind_plain || rc=1; \
	$(TEST_PRELOAD) $(TEST_TIMEOUT) 30 $(TEST_DIR)/deepbind_plain dlmopen || rc=1; \
	$(TEST_PRELOAD) PROFMALLOC_KEEP_DEEPBIND=1 $(TEST_TIMEOUT) 30 $(TEST_DIR)/deepbind_plain keep || rc=1; \
	echo "== make install, then programs built with pkg-config"; \
	test/integration/installed.sh || rc=1; \
	echo "== real programs with and without LD_PRELOAD"; \
	PRELOAD_CHECK=$(TEST_DIR)/preload_check test/integration/run.sh $(PM_SO) || rc=1; \
	exit $$rc
