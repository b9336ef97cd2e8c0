#!/usr/bin/env bash
# bench/tools/hot-functions.sh — writes src/hot_functions.txt: the functions
# of build/libprofmalloc.so that small programs run, which the link lays out
# first (the Makefile's text-order.ld).  Each workload runs under
# valgrind --tool=callgrind with the library preloaded, at the default
# sample rate and at 64 KiB; a function is listed under the first workload
# that ran it: start-up and a few mallocs, then the allocation paths
# (one and two threads, thread exit, fork), then the rest.
# Usage (from `make hot-functions`): bench/tools/hot-functions.sh TEXT_RESIDENT_BIN
set -eu -o pipefail
cd "$(dirname "$0")/../.."
resident=$1
so=$(pwd)/build/libprofmalloc.so
bin=build/bench
command -v valgrind >/dev/null || { echo "hot-functions: valgrind is needed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/small.c" <<'EOF'
#include <stdlib.h>
#include <string.h>
int main(void) { char *volatile p = malloc(100); memset(p, 1, 100); free(p); return 0; }
EOF
cc -O2 "$tmp/small.c" -o "$tmp/small"

# Run only where realloc moves a block of over 256 KiB (bench/grow), or
# where a block is aligned beyond a page (the page heap's aligned search),
# these stay in the cold part: one more 64 KiB window of code beside such
# blocks is little, and the hot part must fit one (check-text-resident).
printf '%s\n' pm_large_free_moved pm_pageheap_free_moved pm_release_keep_moved_locked \
    pm_pageheap_move moved_to move_anywhere \
    aligned_fit_locked aligned_across_locked >"$tmp/cold"

cold=$(nm "$so" | awk '$3 == "pm_text_cold" { print "0x" $1 }')
i=0
# text_resident's own check fails under valgrind, which maps no page of the
# library's code: only its allocation calls count here.
run() { # rate command...
    local rate=$1
    shift
    i=$((i + 1))
    mkdir -p "$tmp/$i"
    env -u PROFMALLOC_DUMP ${rate:+PROFMALLOC_SAMPLE_RATE=$rate} LD_PRELOAD="$so" \
        valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$tmp/$i/cg.%p" "$@" \
        >/dev/null 2>"$tmp/$i/log" || [ "$1" = "$resident" ] ||
        { echo "hot-functions: failed: $*" >&2; cat "$tmp/$i/log" >&2; exit 1; }
}
run "" "$tmp/small"
run 0 "$tmp/small"
run "" "$bin/churn" -t 1 -n 200000
run "" "$bin/churn" -t 2 -n 100000
run "" "$bin/threadchurn" -t 2 -n 100
run 65536 "$resident" "${cold:-0}"
run "" "$bin/prodcons" -n 20000
run "" "$bin/server" -n 2000
run "" "$bin/mixed" -n 50000
run "" "$bin/mixed" -n 20000 -m medium
run "" "$bin/realloc" -n 1
run "" "$bin/large" -n 20000
run "" "$bin/grow" -n 20
run "" "$bin/frag" -n 64
run "" "$bin/bigmix" -n 2000
run "" "$bin/larson" -n 2
run "" python3 -c 'import subprocess, json; subprocess.run(["true"]); json.dumps([{"k": "v" * i} for i in range(9999)])'

# The functions of the library each run called, in workload order; a clone
# (name.part.0, name.constprop.0, name.isra.0) goes by its function's name,
# which the link script's patterns cover.
{
    echo "# src/hot_functions.txt — the functions laid out first in the library's code"
    echo "# (the Makefile's text-order.ld): what start-up, the allocation paths and"
    echo "# sampling run, so that a small program's resident pages of the library are"
    echo "# these only.  One name a line, static or not; written by \`make hot-functions\`"
    echo "# (bench/tools/hot-functions.sh), checked by \`make check-text-resident\`."
    echo "# A name ending in .o is an object file, all its functions: the unwinder's,"
    echo "# whose paths depend on the unwind tables of the program sampled."
    echo "prof_unwind.o"
    echo "prof_unwind_cfi.o"
    echo "# The lock's slow paths, which valgrind (one thread at a time) seldom runs."
    echo "pm_lock_wait_slow"
    echo "pm_lock_wake_slow"
    echo "pm_os_futex_wait"
    echo "pm_os_futex_wake"
    for d in $(seq 1 $i); do
        python3 - "$tmp/$d"/cg.* <<'PY' | sort -u
import re, sys
# callgrind names an object or a function once, "(id) name", then "(id)"
for path in sys.argv[1:]:
    obs, fns, cur = {}, {}, ""
    for line in open(path, errors="replace"):
        m = re.match(r"(c?ob|c?fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if not m:
            continue
        kind, ident, name = m.groups()
        table = obs if kind.endswith("ob") else fns
        if name:
            table[ident] = name
        if kind == "ob":
            cur = obs.get(ident, "")
        elif kind == "fn" and "libprofmalloc" in cur:
            f = re.sub(r"'.*", "", fns.get(ident, ""))
            f = re.sub(r"\.(part|constprop|isra|cold)(\.\d+)?.*$", "", f)
            if re.fullmatch(r"[A-Za-z_]\w*", f):
                print(f)
PY
    done | awk '!seen[$0]++' | grep -vxF -f "$tmp/cold"
} >"$tmp/list"
n=$(grep -vc '^#' "$tmp/list")
cp "$tmp/list" src/hot_functions.txt
echo "hot-functions: wrote src/hot_functions.txt ($n functions); rebuild and run make check-text-resident"
