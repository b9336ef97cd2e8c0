# bench/bench.mk — benchmark targets, included by the top-level Makefile.
# Uses BUILD (build dir), CC and PM_SO ($(BUILD)/libprofmalloc.so) from it.
#   make bench         full run (~32 min on 2 cores): writes doc/benchmarks.md
#                      and doc/img/benchmarks-{time,rss}.svg
#   make bench-quick   smoke test (< 1 min): writes $(BUILD)/bench-quick/
#   make bench-progs   only build the workloads
#   make bench-targets the allocator core's targets (churn, two threads,
#                      prodcons, peak RSS) against glibc, the peers and the
#                      ceiling allocator, checked and bare: bench/targets.sh (~10 min)
#   make bench-real    real programs on the machine (gcc, python3, sqlite3, git,
#                      perl, sort) under glibc and each allocator: peak RSS and
#                      time as ratios, outputs compared: bench/realprogs.sh (~1 min)
# BENCH_ARGS passes options to bench/run.sh, e.g.
#   make bench BENCH_ARGS="-w churn,prodcons -a glibc,pm -r 5"

BENCH_BIN := $(BUILD)/bench
BENCH_NAMES := fastpath churn larson prodcons threadchurn realloc grow large bigmix frag replay \
	mixed server tide bigtouch bigrepeat holes rounds falseshare trade strings
BENCH_EXES := $(addprefix $(BENCH_BIN)/,$(BENCH_NAMES))
BENCH_CFLAGS := -std=gnu11 -O2 -g -pthread -Wall -Wextra
BENCH_ARGS ?=

BENCH_CEILING := $(BENCH_BIN)/libceiling.so
TARGETS_ARGS ?=

.PHONY: bench-run bench-quick bench-progs bench-targets bench-real
BENCH_TARGETS += bench-run

# pythreads and pyrounds are Python scripts (bench/*.py), installed executable,
# with the module they share beside them
BENCH_PY := $(BENCH_BIN)/pythreads $(BENCH_BIN)/pyrounds $(BENCH_BIN)/pybench.py

$(BENCH_BIN)/pybench.py: bench/pybench.py
	@mkdir -p $(BENCH_BIN)
	install -m 644 $< $@

bench-progs: $(BENCH_EXES) $(BENCH_PY) $(BENCH_CEILING)

$(BENCH_BIN)/%: bench/%.py
	@mkdir -p $(BENCH_BIN)
	install -m 755 $< $@

# the do-nothing yardstick (see its header); the flags keep gcc from turning
# calloc's zeroing loop back into a call to calloc
$(BENCH_CEILING): bench/tools/ceiling.c
	@mkdir -p $(BENCH_BIN)
	$(CC) -O2 -shared -fPIC -ftls-model=initial-exec -fno-builtin \
	    -fno-tree-loop-distribute-patterns -Wall -Wextra -o $@ $<

bench-targets: $(PM_SO) $(BENCH_EXES) $(BENCH_CEILING)
	bash bench/targets.sh -b $(BENCH_BIN) -p $(PM_SO) -c $(BENCH_CEILING) $(TARGETS_ARGS)

REAL_ARGS ?=
bench-real: $(PM_SO)
	bash bench/realprogs.sh -p $(PM_SO) $(REAL_ARGS)

$(BENCH_EXES): $(BENCH_BIN)/%: bench/%.c bench/bench_common.h
	@mkdir -p $(BENCH_BIN)
	$(CC) $(BENCH_CFLAGS) -o $@ $< -lm

bench-run: $(PM_SO) $(BENCH_EXES) $(BENCH_PY)
	bash bench/run.sh -b $(BENCH_BIN) -p $(PM_SO) $(BENCH_ARGS)

bench-quick: $(PM_SO) $(BENCH_EXES) $(BENCH_PY)
	bash bench/run.sh -q -b $(BENCH_BIN) -p $(PM_SO) -o $(BUILD)/bench-quick $(BENCH_ARGS)
