# test/integration/resident.mk — check-text-resident: the code a small
# program runs lies in the first part of the library's code, in pages of its
# own (the Makefile's text-order.ld, src/hot_functions.txt); see
# test/integration/text_resident.c.  Sampling at 64 KiB, so that the
# profiler's paths run too.  gcc's build also keeps those functions within
# the first 64 KiB of code (clang's code for them is larger).
#   make hot-functions   writes src/hot_functions.txt anew (needs valgrind)

RESIDENT_TEST := $(BUILD)/test/text_resident
RESIDENT_WINDOW := $(if $(shell $(CC) --version 2>/dev/null | grep -i clang),,one-window)

$(RESIDENT_TEST): test/integration/text_resident.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -pthread $< -o $@

.PHONY: check-text-resident hot-functions
CHECK_TARGETS += check-text-resident
check-text-resident: $(RESIDENT_TEST) $(PM_SO)
	@cold=$$(nm $(PM_SO) | awk '$$3 == "pm_text_cold" { print "0x" $$1 }'); \
	[ -n "$$cold" ] || { echo "check-text-resident: no pm_text_cold in $(PM_SO)"; exit 1; }; \
	env -u PROFMALLOC_DUMP LD_PRELOAD=$(abspath $(PM_SO)) PROFMALLOC_SAMPLE_RATE=65536 \
		$(TEST_TIMEOUT) 120 $(RESIDENT_TEST) $$cold $(RESIDENT_WINDOW)

hot-functions: $(RESIDENT_TEST) $(PM_SO) bench-progs
	bench/tools/hot-functions.sh $(RESIDENT_TEST)
