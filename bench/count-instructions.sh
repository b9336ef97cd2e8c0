#!/usr/bin/env bash
# bench/count-instructions.sh — instructions per malloc+free pair, per size,
# for glibc and profmalloc (sample rate 0 and default): repeatable where
# wall time is not.
#
# Runs `fastpath -m pairs -z SIZE -n N` twice (N1 and N2 pairs) under
# `perf stat -e instructions:u` when the CPU/VM exposes the counter, else
# under `valgrind --tool=callgrind`, and prints (I(N2) - I(N1)) / (N2 - N1):
# start-up and the loop's set-up cancel out, the loop body (malloc, two
# stores, a load, free) and any amortised slow path (refills, sampling at
# the given rate) remain.
# A last row does the same for `churn -m bare` (random frees and mallocs of
# 16-256 B with 4000 live, blocks untouched): instructions per step, one
# free and one malloc plus the loop's own ~49 (random numbers, the slot).
#
# Usage: bench/count-instructions.sh [-b BIN_DIR] [-p PM_SO] [-a "glibc pm-0 pm ..."]
#                                    [-z "16 64 ..."] [-m perf|callgrind]
#   allocators: glibc pm-0 pm pm-64k jemalloc tcmalloc mimalloc (default: glibc pm-0 pm)
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
BIN=build/bench
PM_SO=build/libprofmalloc.so
ALLOCS="glibc pm-0 pm"
SIZES="16 32 64 128 256 1024 4096 32768"
METHOD=
N1=100000
N2=300000
while getopts "b:p:a:z:m:h" o; do
    case $o in
    b) BIN=$OPTARG ;; p) PM_SO=$OPTARG ;; a) ALLOCS=${OPTARG//,/ } ;; z) SIZES=${OPTARG//,/ } ;;
    m) METHOD=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 64 ;;
    esac
done
[ -x "$BIN/fastpath" ] || { echo "count-instructions: $BIN/fastpath not built (make bench-progs)" >&2; exit 1; }
pm_abs=$(cd "$(dirname "$PM_SO")" && pwd)/$(basename "$PM_SO")
. bench/find-lib.sh

if [ -z "$METHOD" ]; then
    if command -v perf >/dev/null && perf stat -x, -e instructions:u true 2>&1 | grep -q '^[0-9]'; then
        METHOD=perf
    elif command -v valgrind >/dev/null; then
        METHOD=callgrind
    else
        echo "count-instructions: need perf (with a working instructions counter) or valgrind (apt-get install valgrind)" >&2
        exit 1
    fi
fi

count() { # "env assignments" program args... -> instruction count
    local out e=$1
    shift
    local -a ea
    read -r -a ea <<<"$e"
    case $METHOD in
    perf)
        out=$(perf stat -x, -e instructions:u env "${ea[@]}" "$@" 2>&1 >/dev/null | awk -F, '/instructions/ { print $1; exit }') ;;
    callgrind)
        out=$(env "${ea[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null \
              | awk '/Collected :/ { print $NF; exit }' | tr -d ,) ;;
    esac
    echo "$out"
}

envof() { # allocator -> env assignments
    case $1 in
    glibc) echo "-u LD_PRELOAD" ;;
    pm) echo "-u PROFMALLOC_SAMPLE_RATE LD_PRELOAD=$pm_abs" ;;
    pm-64k) echo "LD_PRELOAD=$pm_abs PROFMALLOC_SAMPLE_RATE=65536" ;;
    pm-*) echo "LD_PRELOAD=$pm_abs PROFMALLOC_SAMPLE_RATE=${1#pm-}" ;;
    jemalloc) l=$(find_lib libjemalloc.so.2) && echo "LD_PRELOAD=$l" ;;
    tcmalloc) l=$(find_lib libtcmalloc_minimal.so.4) && echo "LD_PRELOAD=$l" ;;
    mimalloc) l=$(find_lib libmimalloc.so.2) && echo "LD_PRELOAD=$l" ;;
    *) return 1 ;;
    esac
}

# Prints " X |": instructions per operation of `program -n N`, differenced
# between N1 and N2 operations, for allocator $1.
per_op() {
    local a=$1 e i1 i2
    shift
    if [[ $a == pm* ]] && [ ! -f "$PM_SO" ]; then printf ' n/a |'; return; fi
    e=$(envof "$a") || { printf ' n/a |'; return; }
    i1=$(count "$e" "$@" -n $N1)
    i2=$(count "$e" "$@" -n $N2)
    if [[ $i1 =~ ^[0-9]+$ ]] && [[ $i2 =~ ^[0-9]+$ ]]; then
        awk -v a="$i1" -v b="$i2" -v n=$((N2 - N1)) 'BEGIN { printf " %.1f |", (b - a) / n }'
    else
        printf ' FAIL |'
    fi
}

echo "# instructions per malloc+free pair ($METHOD; ($N2 - $N1) pairs differenced)"
printf '| size |'; for a in $ALLOCS; do printf ' %s |' "$a"; done; echo
printf '| ---: |'; for a in $ALLOCS; do printf ' ---: |'; done; echo
for z in $SIZES; do
    printf '| %s |' "$z"
    for a in $ALLOCS; do per_op "$a" "$BIN/fastpath" -m pairs -z "$z"; done
    echo
done
if [ -x "$BIN/churn" ]; then
    printf '| churn -m bare, per step |'
    for a in $ALLOCS; do per_op "$a" "$BIN/churn" -m bare; done
    echo
fi
