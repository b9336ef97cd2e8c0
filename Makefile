# profmalloc — a hand-written, non-recursive GNU Makefile.
# Works on a fresh clone with gcc and make alone; ./configure (optional)
# writes config.mk to override the defaults below.
#
#   make            build/libprofmalloc.so (+ .so.0 link) and build/libprofmalloc.a
#   make check      the whole test suite (needs libcmocka-dev)
#   make bench      benchmarks against glibc and the peers (doc/benchmarks.md)
#   make demo       a leaky program run under the preload, with its heap profile
#   make docs       the PROFMALLOC_* variables in README.md, doc/profmalloc.3 and
#                   include/profmalloc.h, from src/options.c (commit the result)
#   make install    PREFIX=/usr/local DESTDIR= : libs, header, profmalloc.pc, man page

-include config.mk

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
MANDIR ?= $(PREFIX)/share/man
BUILD ?= build
CC ?= cc
LD ?= ld
AR ?= ar
OBJCOPY ?= objcopy
CMOCKA_CFLAGS ?=
CMOCKA_LIBS ?= -lcmocka
PM_EXTRA_CFLAGS ?=

VERSION := 0.1.0
SONAME := libprofmalloc.so.0

# -fno-builtin-malloc: else gcc turns malloc+memset into a call to calloc.
# -fno-reorder-blocks-and-partition: keeps every allocator function inside
#   [pm_text_begin, pm_text_end], which the profiler uses to drop its frames.
PM_NOSPLIT := $(shell $(CC) -Werror -fno-reorder-blocks-and-partition -E -x c /dev/null >/dev/null 2>&1 && echo -fno-reorder-blocks-and-partition)
# -ffunction-sections: the link lays the functions out in the order of
#   src/hot_functions.txt (below).
# -fno-plt: calls into the C library go through the GOT (bound at load, -z
#   now), so no 1.4 KB PLT sits in the hot code's 64 KiB window ahead of
#   it (check-text-resident).
PM_CFLAGS := -std=c11 -O2 -g -Wall -Wextra -fPIC -fvisibility=hidden \
	-fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc \
	-ftls-model=initial-exec -fno-plt $(PM_NOSPLIT) -ffunction-sections \
	-D_GNU_SOURCE -Isrc -Iinclude $(PM_EXTRA_CFLAGS)

# The ladder, bottom up: os → fmt/options → meta → sizeclass/pagemap →
# pageheap → central → tcache → alloc, stats, init; then the profiler
# family, bottom up (doc/design.md, "The ladder"); override.c (the libc
# names) last.
CORE_SRCS := src/os_linux.c src/fmt.c src/math.c src/options.c src/meta.c src/sizeclass.c \
	src/pagemap.c src/pageheap.c src/pagerelease.c src/central.c src/tcache.c src/guard.c src/alloc.c \
	src/large.c src/stats.c src/init.c \
	src/prof_sampler.c src/prof_unwind_cfi.c src/prof_objects.c src/prof_unwind.c \
	src/prof_sites.c src/prof_encode.c src/prof_symbols.c src/prof_pprof.c src/prof_dump.c \
	src/prof_peak.c src/prof_triggers.c src/prof_leaks.c src/prof_timeline.c src/prof_gperftools.c \
	src/prof_unwind_go.c src/prof_http.c
OVERRIDE_SRCS := src/override.c

OBJ := $(BUILD)/obj
CORE_OBJS := $(CORE_SRCS:src/%.c=$(OBJ)/%.o)
OVERRIDE_OBJS := $(OVERRIDE_SRCS:src/%.c=$(OBJ)/%.o)
MARK_BEGIN := $(OBJ)/textmark_begin.o
MARK_END := $(OBJ)/textmark_end.o

PM_SO := $(BUILD)/libprofmalloc.so
PM_A := $(BUILD)/libprofmalloc.a
PM_TEST_A := $(BUILD)/libprofmalloc-test.a

CHECK_TARGETS :=
BENCH_TARGETS :=

.PHONY: all check bench demo install uninstall clean sizeclass-table math-tables
all: $(PM_SO) $(PM_A)

# Code off the allocation paths is built for size: the library's text is
# resident whole in every process that loads it (the kernel maps 64 KiB
# around each page fault).  That is the code that runs for reports (the
# profile writer, malloc_stats and malloc_info, the number formatting), at
# start-up (options, init, needed, meta, the size classes, the system calls'
# wrappers) and the unwinder and the peak's bookkeeping (prof_peak.c), which
# run for samples only; prof_sites.c, on every sampled free, stays at -O2.
# The measurements are in the commits that chose each file.
COLD_OBJS := $(OBJ)/prof_encode.o $(OBJ)/prof_symbols.o $(OBJ)/prof_pprof.o $(OBJ)/prof_dump.o $(OBJ)/stats.o $(OBJ)/fmt.o $(OBJ)/options.o \
	$(OBJ)/init.o $(OBJ)/needed.o $(OBJ)/meta.o $(OBJ)/os_linux.o \
	$(OBJ)/prof_sampler.o $(OBJ)/prof_unwind_cfi.o $(OBJ)/prof_objects.o $(OBJ)/prof_unwind.o \
	$(OBJ)/prof_leaks.o $(OBJ)/prof_triggers.o $(OBJ)/prof_timeline.o $(OBJ)/prof_gperftools.o \
	$(OBJ)/prof_unwind_go.o $(OBJ)/prof_http.o $(OBJ)/guard.o $(OBJ)/prof_peak.o $(OBJ)/sizeclass.o
$(COLD_OBJS): PM_CFLAGS += -Os
# The fast paths' two stores into a freed block (its link and the free key)
# stay two moves: gcc 12's SLP pass made them four vector instructions.
PM_NOSLP := $(shell $(CC) -Werror -fno-tree-slp-vectorize -E -x c /dev/null >/dev/null 2>&1 && echo -fno-tree-slp-vectorize)
$(OBJ)/override.o $(OBJ)/alloc.o: PM_CFLAGS += $(PM_NOSLP)

$(OBJ)/%.o: src/%.c
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -MMD -MP -c $< -o $@

$(MARK_BEGIN): src/textmark.c
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -MMD -MP -c $< -o $@
$(MARK_END): src/textmark.c
	@mkdir -p $(@D)
	$(CC) $(PM_CFLAGS) -DPM_TEXT_END -MMD -MP -c $< -o $@

# One relocatable object holds the whole library, bracketed by the marks,
# its code in two parts: first the functions of src/hot_functions.txt (what
# start-up, the allocation paths and sampling run), then pm_text_cold and
# the rest (reports, the HTTP server, dumps, error paths).  The kernel maps
# the 64 KiB around every page fault in the library's file, so a program
# that never runs the rest keeps it out of its resident memory (make
# check-text-resident; `make hot-functions` lists the functions anew).
# PM_SPARSE_BSS's arrays leave as an output section of their own, which
# links place after .bss (src/pm.h).
$(BUILD)/text-order.ld: src/hot_functions.txt Makefile
	@mkdir -p $(@D)
	awk 'BEGIN { print "SECTIONS {\n  .text : {\n    *textmark_begin.o(.text .text.*)" } \
	     /^[A-Za-z_][A-Za-z0-9_]*\.o$$/ { printf "    *%s(.text .text.*)\n", $$1; next } \
	     /^[A-Za-z_]/ { printf "    *(.text.%s .text.%s.* .text.*.%s)\n", $$1, $$1, $$1 } \
	     END { print "    HIDDEN(pm_text_cold = .);\n    *(EXCLUDE_FILE(*textmark_end.o) .text EXCLUDE_FILE(*textmark_end.o) .text.*)"; \
	           print "    *textmark_end.o(.text .text.*)\n  }"; \
	           print "  profmalloc_sparse (NOLOAD) : { *(.bss.profmalloc_sparse) }\n}" }' $< >$@
$(BUILD)/profmalloc.o: $(MARK_BEGIN) $(CORE_OBJS) $(OVERRIDE_OBJS) $(MARK_END) $(BUILD)/text-order.ld
	$(LD) -r -T $(BUILD)/text-order.ld -o $@ $(filter %.o,$^)
$(BUILD)/profmalloc-core.o: $(MARK_BEGIN) $(CORE_OBJS) $(MARK_END) $(BUILD)/text-order.ld
	$(LD) -r -T $(BUILD)/text-order.ld -o $@ $(filter %.o,$^)

# needed.c (dlopen at start-up) and deepbind.c (a dlopen of our own) go
# into the shared library only: in the archive, a dlopen would make every
# static link warn (src/needed.c), and a static program's is libc.a's.
# Both run at start-up: linked first, their code shares the hot part's pages.
# max-page-size: each segment starts on a 64 KiB boundary, where the C
# library (2.35 and later) also puts the library's base, so the hot part
# fills fault-around windows of its own.  -fini names no function: crti's
# _fini is empty, and the loader's call at exit would fault in the last
# window of the code, past the cold part.
# PM_EXTRA_CFLAGS on the link too: a -fsanitize=... build needs its runtime.
$(PM_SO): $(OBJ)/needed.o $(OBJ)/deepbind.o $(BUILD)/profmalloc.o
	$(CC) $(PM_EXTRA_CFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,-z,now -Wl,-z,max-page-size=0x10000 -Wl,-fini=pm_no_fini -o $@ $^ -pthread
	ln -sf libprofmalloc.so $(BUILD)/$(SONAME)

# The archive's object keeps only the exported names global: the internal
# pm_* names (hidden in the .so) would clash with a program's own.
$(BUILD)/profmalloc-local.o: $(BUILD)/profmalloc.o
	$(OBJCOPY) --localize-hidden $< $@

$(PM_A): $(BUILD)/profmalloc-local.o
	rm -f $@
	$(AR) rcs $@ $<

# The allocator without the libc names: unit tests call pm_* directly
# while the test program itself runs on the C library's malloc.
$(PM_TEST_A): $(BUILD)/profmalloc-core.o
	rm -f $@
	$(AR) rcs $@ $<

include src/cli/cli.mk
-include $(wildcard test/*.mk test/*/*.mk bench/*.mk doc/*.mk)

check: $(CHECK_TARGETS)
	@echo "make check: all test groups passed"

bench: $(BENCH_TARGETS)

# Links the demo against the library in build/ (rpath computed here, at
# build time), runs it under `profmalloc run`, and says what the report shows.
demo: $(BUILD)/demo $(CLI_BIN)
	@rm -rf $(BUILD)/demo-run
	$(CLI_BIN) run --rate 64k --out $(BUILD)/demo-run -n 5 -- $(BUILD)/demo $(BUILD)
	@echo
	@echo "What this shows (the sizes are estimates from samples, not exact counts):"
	@echo " - remember() holds the most and grows with every request: its cache entries are"
	@echo "   never evicted. That is the leak; 'profmalloc top --lines' points at the malloc."
	@echo " - build_table() holds its 8 MiB table on purpose until exit. Blocks larger than"
	@echo "   the sampling rate are always sampled, so it is exact (no std.err)."
	@echo " - handle_request() is missing: its buffers are freed. It allocated the most"
	@echo "   bytes of all: see 'profmalloc top --alloc'."
	@echo " - The sampled total differs from the allocator's exact in-use figure: it is an"
	@echo "   estimate from one sample per 64 KiB on average (std.err gives its uncertainty),"
	@echo "   and counts the bytes asked for: a cache entry is 56 bytes, where the exact"
	@echo "   figure counts the 64 bytes of its size class."
	@echo
	@echo "Next, try:"
	@echo "  $(CLI_BIN) top $(BUILD)/demo.pb.gz --alloc --lines"
	@echo "  $(CLI_BIN) flame $(BUILD)/demo.pb.gz -o $(BUILD)/demo.svg    (open it in a browser)"
	@echo "  $(CLI_BIN) run -- ./your-program"

$(BUILD)/demo: test/demo/demo.c $(PM_SO)
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -Wextra -Iinclude $< -o $@ -L$(BUILD) -lprofmalloc -Wl,-rpath,$(abspath $(BUILD))

# The size-class table with its waste, as in doc/design.md.
sizeclass-table: $(BUILD)/sizeclass-table
	@$(BUILD)/sizeclass-table
$(BUILD)/sizeclass-table: test/demo/sizeclass_table.c $(PM_TEST_A)
	$(CC) $(PM_CFLAGS) $< -o $@ $(PM_TEST_A) -pthread

# src/math.c's tables, from libm (paste the output there).
math-tables: $(BUILD)/math-tables
	@$(BUILD)/math-tables
$(BUILD)/math-tables: test/demo/math_tables.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -Wextra $< -o $@ -lm

install: $(PM_SO) $(PM_A)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(MANDIR)/man3
	install -m 755 $(PM_SO) $(DESTDIR)$(LIBDIR)/libprofmalloc.so.$(VERSION)
	ln -sf libprofmalloc.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libprofmalloc.so
	install -m 644 $(PM_A) $(DESTDIR)$(LIBDIR)/libprofmalloc.a
	install -m 644 include/profmalloc.h $(DESTDIR)$(INCLUDEDIR)/profmalloc.h
	sed -e 's|@prefix@|$(PREFIX)|' -e 's|@libdir@|$(LIBDIR)|' -e 's|@includedir@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' doc/profmalloc.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/profmalloc.pc
	install -m 644 doc/profmalloc.3 $(DESTDIR)$(MANDIR)/man3/profmalloc.3

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libprofmalloc.so* $(DESTDIR)$(LIBDIR)/libprofmalloc.a \
		$(DESTDIR)$(INCLUDEDIR)/profmalloc.h $(DESTDIR)$(LIBDIR)/pkgconfig/profmalloc.pc \
		$(DESTDIR)$(MANDIR)/man3/profmalloc.3

clean:
	rm -rf $(BUILD)

-include $(wildcard $(OBJ)/*.d)
