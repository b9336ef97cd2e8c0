# doc/docs.mk — the options' documentation, generated from the options
# table (src/options.c) by doc/gen_options.c; included by the top Makefile.
#
#   make docs         rewrites the generated part of each file below (commit it)
#   check-docs        (in make check) fails when a committed file differs from
#                     what the generator writes now: run `make docs`

DOC_GEN := $(BUILD)/gen_options
DOC_FILES := README.md doc/profmalloc.3 include/profmalloc.h

$(DOC_GEN): doc/gen_options.c $(PM_TEST_A)
	$(CC) $(PM_CFLAGS) $< -o $@ $(PM_TEST_A) -pthread

.PHONY: docs check-docs
docs: $(DOC_GEN)
	@for f in $(DOC_FILES); do \
		$(DOC_GEN) $$f > $$f.new && mv $$f.new $$f || { rm -f $$f.new; exit 1; }; \
	done

CHECK_TARGETS += check-docs
check-docs: $(DOC_GEN)
	@mkdir -p $(BUILD)/docs
	@rc=0; for f in $(DOC_FILES); do \
		out=$(BUILD)/docs/$$(basename $$f); \
		$(DOC_GEN) $$f > $$out || { rc=1; continue; }; \
		diff -u $$f $$out || { echo "check-docs: $$f is not what src/options.c says: run make docs"; rc=1; }; \
	done; \
	[ $$rc = 0 ] && echo "check-docs: README.md, doc/profmalloc.3, include/profmalloc.h agree with src/options.c"; \
	exit $$rc
