# test/cli/cli.mk — tests of the profmalloc command (test/cli/test_cli.py),
# included by the top Makefile.  sites.c has known allocation sites; it is
# built four ways (PIE, non-PIE, stripped with a .gnu_debuglink file,
# stripped with its debug file under a .build-id tree) against a shared
# library with a site of its own.  check-cli runs the suite (about 15 s),
# check-cli-fuzz a bounded libFuzzer run of the readers (skipped without
# clang); `make fuzz FUZZ_SECONDS=600` runs it longer.
CLI_TEST := $(BUILD)/test/cli
CLI_TEST_CFLAGS := -std=gnu11 -O1 -g -Wall -Wextra -fno-builtin -fno-omit-frame-pointer
CLI_SITES := $(CLI_TEST)/sites_pie $(CLI_TEST)/sites_nopie $(CLI_TEST)/sites_debuglink $(CLI_TEST)/sites_buildid

$(CLI_TEST)/libsites.so: test/cli/sites_lib.c
	@mkdir -p $(@D)
	$(CC) $(CLI_TEST_CFLAGS) -fPIC -shared -Wl,--build-id $< -o $@

$(CLI_TEST)/sites_pie: test/cli/sites.c $(CLI_TEST)/libsites.so
	$(CC) $(CLI_TEST_CFLAGS) -fPIE -pie -Wl,--build-id $< -o $@ -L$(CLI_TEST) -lsites -Wl,-rpath,'$$ORIGIN' -ldl

$(CLI_TEST)/sites_nopie: test/cli/sites.c $(CLI_TEST)/libsites.so
	$(CC) $(CLI_TEST_CFLAGS) -fno-pie -no-pie -Wl,--build-id $< -o $@ -L$(CLI_TEST) -lsites -Wl,-rpath,'$$ORIGIN' -ldl

# stripped, its debug information in sites_debuglink.debug beside it
$(CLI_TEST)/sites_debuglink: test/cli/sites.c $(CLI_TEST)/libsites.so
	$(CC) $(CLI_TEST_CFLAGS) -fPIE -pie -Wl,--build-id $< -o $@.full -L$(CLI_TEST) -lsites -Wl,-rpath,'$$ORIGIN' -ldl
	$(OBJCOPY) --only-keep-debug $@.full $@.debug
	$(OBJCOPY) --strip-all --add-gnu-debuglink=$@.debug $@.full $@
	rm -f $@.full

# stripped, its debug file only under debug/.build-id/xx/yyyy.debug
$(CLI_TEST)/sites_buildid: test/cli/sites.c $(CLI_TEST)/libsites.so
	$(CC) $(CLI_TEST_CFLAGS) -fPIE -pie -Wl,--build-id $< -o $@.full -L$(CLI_TEST) -lsites -Wl,-rpath,'$$ORIGIN' -ldl
	id=$$(readelf -Wn $@.full | sed -n 's/.*Build ID: *\([0-9a-f]*\).*/\1/p'); test -n "$$id"; \
		d=$(CLI_TEST)/debug/.build-id/$$(echo $$id | cut -c1-2); mkdir -p $$d; \
		$(OBJCOPY) --only-keep-debug $@.full $$d/$$(echo $$id | cut -c3-).debug
	$(OBJCOPY) --strip-all $@.full $@
	rm -f $@.full

$(CLI_TEST)/test_demangle: test/cli/test_demangle.c src/cli/demangle.c src/cli/profile.c src/cli/inflate.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -O1 -g -Wall -Wextra -D_GNU_SOURCE -Isrc/cli $(CMOCKA_CFLAGS) $^ -o $@ $(CMOCKA_LIBS)

.PHONY: check-cli
CHECK_TARGETS += check-cli
check-cli: $(CLI_BIN) $(PM_SO) $(CLI_SITES) $(CLI_TEST)/test_demangle
	$(CLI_TEST)/test_demangle
	$(TEST_TIMEOUT) 300 python3 test/cli/test_cli.py --build $(BUILD)

# ---- fuzzing the readers (clang's libFuzzer) ---------------------------------
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 600
CLI_FUZZ := $(CLI_TEST)/fuzz_readers
CLI_FUZZ_SRCS := test/cli/fuzz_readers.c src/cli/profile.c src/cli/inflate.c src/cli/report.c \
	src/cli/symbolize.c src/cli/demangle.c src/cli/timeline_read.c

$(CLI_FUZZ): $(CLI_FUZZ_SRCS) src/cli/cli.h src/cli/cli_main.h
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=c11 -g -O1 -D_GNU_SOURCE -Isrc/cli -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined $(CLI_FUZZ_SRCS) -o $@

# The working corpus lives in the build tree, seeded from test/cli/corpus.
.PHONY: check-cli-fuzz fuzz
CHECK_TARGETS += check-cli-fuzz
check-cli-fuzz:
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory $(CLI_FUZZ) && mkdir -p $(CLI_TEST)/fuzz-corpus && \
		cp -n test/cli/corpus/* $(CLI_TEST)/fuzz-corpus/ && \
		$(CLI_FUZZ) -max_total_time=20 -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(CLI_TEST)/ -print_final_stats=0 \
			$(CLI_TEST)/fuzz-corpus 2>$(CLI_TEST)/fuzz.log || { tail -n 40 $(CLI_TEST)/fuzz.log; exit 1; }; \
		tail -n 1 $(CLI_TEST)/fuzz.log; \
	else echo "check-cli-fuzz: skipped ($(FUZZ_CC) not installed; .ci/run installs clang)"; fi

fuzz: $(CLI_FUZZ)
	mkdir -p $(CLI_TEST)/fuzz-corpus
	cp -n test/cli/corpus/* $(CLI_TEST)/fuzz-corpus/
	$(CLI_FUZZ) -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(CLI_TEST)/ $(CLI_TEST)/fuzz-corpus
