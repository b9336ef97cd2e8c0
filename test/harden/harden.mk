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

# The hardened build (PM_CONFIG_HARDENED: safe-linked free lists, checked
# at every pop), made by the top Makefile's own rules in a make of its own,
# and test_harden run on it as the process's malloc.
HARD_DIR := $(BUILD)/hard

.PHONY: hardened-libs check-hardened
hardened-libs:
	+$(MAKE) --no-print-directory BUILD=$(HARD_DIR) \
		PM_EXTRA_CFLAGS='$(PM_EXTRA_CFLAGS) -DPM_CONFIG_HARDENED' $(HARD_DIR)/libprofmalloc.so

CHECK_TARGETS += check-hardened
check-hardened: $(HARDEN_TEST) hardened-libs
	LD_PRELOAD=$(abspath $(HARD_DIR)/libprofmalloc.so) PM_TEST_HARDENED=1 $(TEST_TIMEOUT) 120 $(HARDEN_TEST)
