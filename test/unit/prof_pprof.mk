# test/unit/prof_pprof.mk — unit test of the profile writers
# (src/prof_pprof.c, with prof_symbols.c, prof_encode.c and math.c's
# tables).  Included by the top Makefile, which provides BUILD, CC,
# PM_CFLAGS and CMOCKA_LIBS.
# The test links the writers and os_linux.c directly (not the library);
# libpprof_fixture.so is the same test source built as a shared object,
# which the test loads and deletes to exercise in-memory .dynsym.

PPROF_TEST_SRCS := test/unit/test_prof_pprof.c src/prof_pprof.c src/prof_symbols.c src/prof_encode.c src/fmt.c \
                   src/math.c src/os_linux.c
PPROF_TEST_HDRS := src/pm_prof_pprof.h src/pm_prof_types.h src/pm_prof_symbols.h src/pm_prof_encode.h src/pm_os.h src/pm.h src/pm_math.h \
                   include/profmalloc.h

$(BUILD)/test/test_prof_pprof: $(PPROF_TEST_SRCS) $(PPROF_TEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -o $@ $(PPROF_TEST_SRCS) $(CMOCKA_LIBS) -ldl -lm

$(BUILD)/test/libpprof_fixture.so: test/unit/test_prof_pprof.c
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -DPPROF_FIXTURE_LIB -shared -o $@ $<

.PHONY: check-prof-pprof
check-prof-pprof: $(BUILD)/test/test_prof_pprof $(BUILD)/test/libpprof_fixture.so
	$(BUILD)/test/test_prof_pprof

CHECK_TARGETS += check-prof-pprof
