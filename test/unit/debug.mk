# test/unit/debug.mk — the debug build (./configure --enable-debug defines
# PM_CONFIG_DEBUG): every malloc and free takes the slow path, which checks
# the links it follows and looks for a freed block in its thread's list and
# its span (doc/design.md).  The top Makefile's own rules build it, in a
# make of its own with BUILD=$(DBG_DIR) and the define added:
#   $(DBG_DIR)/libprofmalloc-test.a  the debug core, for test_debug.c
#   $(DBG_DIR)/libprofmalloc.so      the debug library, under which the API
#                                    and stress tests run as the process's malloc
# Included by the top Makefile after test/test.mk (TEST_DIR).

DBG_DIR := $(BUILD)/dbg

.PHONY: debug-libs
debug-libs:
	+$(MAKE) --no-print-directory BUILD=$(DBG_DIR) \
		PM_EXTRA_CFLAGS='$(PM_EXTRA_CFLAGS) -DPM_CONFIG_DEBUG' \
		$(DBG_DIR)/libprofmalloc.so $(DBG_DIR)/libprofmalloc-test.a

$(DBG_DIR)/test_debug: test/unit/test_debug.c test/unit/child_stderr.h debug-libs
	$(CC) $(PM_CFLAGS) -DPM_CONFIG_DEBUG $(CMOCKA_CFLAGS) $< -o $@ $(DBG_DIR)/libprofmalloc-test.a \
		$(CMOCKA_LIBS) -pthread

.PHONY: check-debug
CHECK_TARGETS += check-debug
check-debug: $(DBG_DIR)/test_debug $(TEST_DIR)/test_api_plain $(TEST_DIR)/test_stress_plain
	@rc=0; \
	echo "== test_debug: misuse the debug build catches"; \
	timeout -k 5 60 $(DBG_DIR)/test_debug || rc=1; \
	echo "== test_api and test_stress on the debug build (LD_PRELOAD)"; \
	LD_PRELOAD=$(abspath $(DBG_DIR)/libprofmalloc.so) PM_TEST_REQUIRE_PROFMALLOC=1 \
		timeout -k 5 120 $(TEST_DIR)/test_api_plain || rc=1; \
	LD_PRELOAD=$(abspath $(DBG_DIR)/libprofmalloc.so) PM_TEST_REQUIRE_PROFMALLOC=1 \
		timeout -k 5 120 $(TEST_DIR)/test_stress_plain || rc=1; \
	exit $$rc
