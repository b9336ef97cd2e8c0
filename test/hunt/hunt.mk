# test/hunt/hunt.mk — leak hunting end to end (test_hunt.c runs
# hunt_prog, linked with -lprofmalloc, under the variables under test).
HUNT_DIR := $(BUILD)/test/hunt
HUNT_CFLAGS := -std=gnu11 -O1 -g -fno-inline -fno-optimize-sibling-calls -Wall -Wextra -D_GNU_SOURCE \
	-Iinclude -Itest/unit -pthread

$(HUNT_DIR)/hunt_prog: test/hunt/hunt_prog.c include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(HUNT_CFLAGS) -fno-builtin-malloc $< -o $@ \
		-L$(BUILD) -Wl,--no-as-needed -lprofmalloc -Wl,--as-needed -Wl,-rpath,$(abspath $(BUILD))

# test_hunt links -lprofmalloc for profmalloc_timeline_read
$(HUNT_DIR)/test_hunt: test/hunt/test_hunt.c test/unit/profile_reader.h include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(HUNT_CFLAGS) -fno-builtin-malloc $(CMOCKA_CFLAGS) $< -o $@ -L$(BUILD) -lprofmalloc -Wl,-rpath,$(abspath $(BUILD)) $(CMOCKA_LIBS)

.PHONY: check-hunt
CHECK_TARGETS += check-hunt
check-hunt: $(HUNT_DIR)/test_hunt $(HUNT_DIR)/hunt_prog
	$(HUNT_DIR)/test_hunt

# a gperftools program: built only where libgoogle-perftools-dev's headers
# are (test_gperftools_api skips otherwise)
GPERF_HEADER := $(wildcard /usr/include/gperftools/heap-profiler.h)
ifneq ($(GPERF_HEADER),)
$(HUNT_DIR)/gperf_prog: test/hunt/gperf_prog.c $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(HUNT_CFLAGS) -fno-builtin-malloc $< -o $@ \
		-L$(BUILD) -lprofmalloc -Wl,-rpath,$(abspath $(BUILD))
check-hunt: $(HUNT_DIR)/gperf_prog
endif
