# test/fuzz/fuzz.mk — libFuzzer harnesses (clang -fsanitize=fuzzer):
#   fuzz_alloc    the malloc family, sample-rate changes and heap dumps
#                 over a slot table (test/fuzz/fuzz_alloc.c)
#   fuzz_options  the PROFMALLOC_* parser (test/fuzz/fuzz_options.c)
# The core is built again with clang, coverage, ASan and UBSan, by the top
# Makefile's own rules in a make of its own (BUILD=$(FUZZ_DIR)).  Each run
# starts from the corpus in test/fuzz/corpus/<name> and writes what it
# finds to $(FUZZ_DIR)/corpus-<name>.
#   make check-fuzz   a bounded run in make check (FUZZ_CHECK_SECONDS each)
#   make fuzz-lib     FUZZ_SECONDS=600 (each), for long runs; `make fuzz`
#                     runs it before the CLI's readers (test/cli/cli.mk)
# Without clang (or its libFuzzer), both skip with a message.

FUZZ_DIR := $(BUILD)/fuzz
FUZZ_CC ?= clang
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SECONDS ?= 600
FUZZ_CHECK_SECONDS ?= 10
FUZZ_NAMES := fuzz_alloc fuzz_options
FUZZ_OK := $(shell printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n){(void)d;(void)n;return 0;}' | \
	$(FUZZ_CC) -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1 && echo yes)

.PHONY: fuzz-libs fuzz fuzz-lib check-fuzz fuzz-progs
fuzz: fuzz-lib
fuzz-libs:
	+$(MAKE) --no-print-directory BUILD=$(FUZZ_DIR) CC=$(FUZZ_CC) \
		PM_EXTRA_CFLAGS='$(PM_EXTRA_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN)' \
		$(FUZZ_DIR)/libprofmalloc-test.a

$(FUZZ_DIR)/%: test/fuzz/%.c fuzz-libs
	$(FUZZ_CC) $(filter-out -fno-reorder-blocks-and-partition,$(PM_CFLAGS)) -fsanitize=fuzzer $(FUZZ_SAN) $< -o $@ $(FUZZ_DIR)/libprofmalloc-test.a -pthread

fuzz-progs: $(addprefix $(FUZZ_DIR)/,$(FUZZ_NAMES))

# fuzz_options reports malformed values on stderr: closed for the target.
fuzz_flags_fuzz_options := -close_fd_mask=2
define run_fuzzers
	@rc=0; for f in $(FUZZ_NAMES); do \
		mkdir -p $(FUZZ_DIR)/corpus-$$f; \
		echo "== $$f, $(1) s"; \
		ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 $(FUZZ_DIR)/$$f -max_total_time=$(1) \
			-timeout=20 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/ \
			$$( [ $$f = fuzz_options ] && echo "$(fuzz_flags_fuzz_options)" ) \
			$(FUZZ_DIR)/corpus-$$f test/fuzz/corpus/$${f#fuzz_} >$(FUZZ_DIR)/$$f.log 2>&1 \
			|| { rc=1; echo "FAIL $$f ($(FUZZ_DIR)/$$f.log):"; tail -n 30 $(FUZZ_DIR)/$$f.log; }; \
		grep -E '^stat::number_of_executed_units|^Done' $(FUZZ_DIR)/$$f.log | head -n 2; \
	done; exit $$rc
endef

ifeq ($(FUZZ_OK),yes)
CHECK_TARGETS += check-fuzz
check-fuzz: fuzz-progs
	$(call run_fuzzers,$(FUZZ_CHECK_SECONDS))
fuzz-lib: fuzz-progs
	$(call run_fuzzers,$(FUZZ_SECONDS))
else
CHECK_TARGETS += check-fuzz
check-fuzz fuzz-lib:
	@echo "SKIP $@: $(FUZZ_CC) with libFuzzer (-fsanitize=fuzzer) not found; install clang"
endif
