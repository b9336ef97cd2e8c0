# test/prof/prof.mk — the heap profiler end to end (test_prof.c), in a
# program linked with -lprofmalloc; the known call chain is compiled
# without frame pointers.  Included by the top Makefile.
PROF_DIR := $(BUILD)/test/prof
PROF_TEST_CFLAGS := -std=gnu11 -O1 -g -Wall -Wextra -D_GNU_SOURCE -Iinclude -Itest/unit -pthread \
	-DPM_SOURCE_DIR='"$(CURDIR)"'

$(PROF_DIR)/prof_chain.o: test/prof/prof_chain.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -fomit-frame-pointer -fno-inline -fno-optimize-sibling-calls -c $< -o $@

$(PROF_DIR)/fp_chain.o: test/prof/fp_chain.c
	@mkdir -p $(@D)
	$(CC) -O1 -g -fno-omit-frame-pointer -fno-inline -fno-optimize-sibling-calls -c $< -o $@

# sets its process title over its environment strings (test_dump_at_exit_after_retitle)
$(PROF_DIR)/retitle: test/prof/retitle.c include/profmalloc.h $(PM_SO)
	@mkdir -p $(@D)
	$(CC) $(PROF_TEST_CFLAGS) -fno-builtin-malloc $< -o $@ \
		-L$(BUILD) -Wl,--no-as-needed -lprofmalloc -Wl,--as-needed -Wl,-rpath,$(abspath $(BUILD))

$(PROF_DIR)/test_prof: test/prof/test_prof.c test/unit/profile_reader.h $(PROF_DIR)/prof_chain.o \
		$(PROF_DIR)/fp_chain.o $(PM_SO)
	$(CC) $(PROF_TEST_CFLAGS) $(CMOCKA_CFLAGS) test/prof/test_prof.c $(PROF_DIR)/prof_chain.o \
		$(PROF_DIR)/fp_chain.o -o $@ \
		-L$(BUILD) -lprofmalloc -Wl,-rpath,$(abspath $(BUILD)) $(CMOCKA_LIBS)

.PHONY: check-prof
CHECK_TARGETS += check-prof
check-prof: $(PROF_DIR)/test_prof $(PROF_DIR)/retitle
	$(PROF_DIR)/test_prof
