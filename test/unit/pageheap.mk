# test/unit/pageheap.mk — unit tests of the page heap (test_pageheap.c:
# the mechanism), of its release policy (test_pagerelease.c) and of large
# blocks (test_large.c), each a program of its own linked with PM_TEST_A (the allocator without the libc
# overrides).  Included by the top Makefile, which provides BUILD, CC,
# PM_CFLAGS, CMOCKA_CFLAGS, CMOCKA_LIBS and PM_TEST_A.

PAGEHEAP_TESTS := $(BUILD)/test/test_pageheap $(BUILD)/test/test_pagerelease $(BUILD)/test/test_large

$(PAGEHEAP_TESTS): $(BUILD)/test/%: test/unit/%.c $(wildcard src/*.h) include/profmalloc.h $(PM_TEST_A)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) $(CMOCKA_CFLAGS) $< -o $@ $(PM_TEST_A) $(CMOCKA_LIBS) -lm -pthread

.PHONY: check-pageheap
CHECK_TARGETS += check-pageheap
check-pageheap: $(PAGEHEAP_TESTS)
	timeout -k 5 60 $(BUILD)/test/test_pageheap
	timeout -k 5 60 $(BUILD)/test/test_pagerelease
	timeout -k 5 60 $(BUILD)/test/test_large
