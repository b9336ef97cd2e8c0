# test/harden/harden.mk — misuse, exhaustion and abuse of the public API
# (test/harden/test_harden.c, linked with -lprofmalloc, every case in a
# forked child).  Included by the top Makefile after test/test.mk.

HARDEN_TEST := $(TEST_DIR)/test_harden

$(HARDEN_TEST): test/harden/test_harden.c test/unit/child_stderr.h include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(TEST_CFLAGS) $(TEST_NOBUILTIN) $< -o $@ $(TEST_LINK_PM) $(CMOCKA_LIBS) -ldl

.PHONY: check-harden
CHECK_TARGETS += check-harden
check-harden: $(HARDEN_TEST)
	$(TEST_TIMEOUT) 120 $(HARDEN_TEST)
