# test/unit/core.mk — unit tests of the allocator core (test/unit/test_core.c):
# size classes, page map, page heap, central lists, thread caches, the
# malloc family, stats, sampler, size parsing/options and invalid frees.
# Included by the top Makefile, which provides BUILD, CC, PM_CFLAGS,
# CMOCKA_LIBS and PM_TEST_A (the allocator without the libc overrides: the
# test calls pm_* directly and itself runs on the C library's malloc).

CORE_TEST := $(BUILD)/test/test_core
CORE_TEST_HDRS := $(wildcard src/*.h) include/profmalloc.h

$(CORE_TEST): test/unit/test_core.c $(CORE_TEST_HDRS) $(PM_TEST_A)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(CMOCKA_CFLAGS) $< -o $@ $(PM_TEST_A) $(CMOCKA_LIBS) -lm -pthread

.PHONY: check-core
CHECK_TARGETS += check-core
check-core: $(CORE_TEST)
	timeout -k 5 60 $(CORE_TEST)
