# test/unit/debug.mk — the debug build (./configure --enable-debug defines
# PM_CONFIG_DEBUG): every malloc and free takes the slow path, which checks
# the links it follows and looks for a freed block in its thread's list and
# its span (doc/design.md).  Built here beside the release objects:
#   $(DBG_DIR)/test_debug          test/unit/test_debug.c on the debug core
#   $(DBG_DIR)/libprofmalloc.so    the debug library, under which the API and
#                                  stress tests run as the process's malloc
# Included by the top Makefile after test/test.mk (TEST_DIR).

DBG_DIR := $(BUILD)/dbg
DBG_CFLAGS := $(PM_CFLAGS) -DPM_CONFIG_DEBUG
DBG_OBJS := $(CORE_SRCS:src/%.c=$(DBG_DIR)/%.o)

$(DBG_DIR)/%.o: src/%.c $(wildcard src/*.h) include/profmalloc.h
	@mkdir -p $(@D)
	$(CC) $(DBG_CFLAGS) -c $< -o $@

$(DBG_DIR)/core.o: $(MARK_BEGIN) $(DBG_OBJS) $(MARK_END)
	$(LD) -r -o $@ $^
$(DBG_DIR)/profmalloc.o: $(MARK_BEGIN) $(DBG_OBJS) $(DBG_DIR)/override.o $(MARK_END)
	$(LD) -r -o $@ $^
$(DBG_DIR)/libprofmalloc.so: $(DBG_DIR)/profmalloc.o $(DBG_DIR)/needed.o
	$(CC) $(PM_EXTRA_CFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,-z,now -o $@ $^ -pthread

$(DBG_DIR)/test_debug: test/unit/test_debug.c test/unit/child_stderr.h $(DBG_DIR)/core.o
	$(CC) $(DBG_CFLAGS) $(CMOCKA_CFLAGS) $< -o $@ $(DBG_DIR)/core.o $(CMOCKA_LIBS) -pthread

.PHONY: check-debug
CHECK_TARGETS += check-debug
check-debug: $(DBG_DIR)/test_debug $(DBG_DIR)/libprofmalloc.so $(TEST_DIR)/test_api_plain \
		$(TEST_DIR)/test_stress_plain
	@rc=0; \
	echo "== test_debug: misuse the debug build catches"; \
	timeout -k 5 60 $(DBG_DIR)/test_debug || rc=1; \
	echo "== test_api and test_stress on the debug build (LD_PRELOAD)"; \
	LD_PRELOAD=$(abspath $(DBG_DIR)/libprofmalloc.so) PM_TEST_REQUIRE_PROFMALLOC=1 \
		timeout -k 5 120 $(TEST_DIR)/test_api_plain || rc=1; \
	LD_PRELOAD=$(abspath $(DBG_DIR)/libprofmalloc.so) PM_TEST_REQUIRE_PROFMALLOC=1 \
		timeout -k 5 120 $(TEST_DIR)/test_stress_plain || rc=1; \
	exit $$rc
