#!/usr/bin/env bash
# bench/targets.sh — the allocator core's speed and memory targets, measured
# side by side: single-thread churn (>= 3x glibc), churn on two threads
# (~2x one thread), producer/consumer (>= 10x glibc), and peak RSS on the
# same runs (<= 1.1x glibc).
#
# A second table covers the whole size range (issue 25's workloads): mixed
# (16 B-256 KiB, 1 and 2 threads), medium (1-256 KiB only), pages (4-64 KiB
# only, 16 384 live), server (trees
# freed by another thread), tide (a live set rising to 320 MB and falling),
# bigtouch (64 KiB-4 MiB, three bytes touched), aligned (the same from
# posix_memalign on 64 KiB-2 MiB), bigrepeat (2-16 MiB
# buffers filled), large2 (64 KiB-8 MiB blocks, every page written, on two
# threads at once: the page heap's lock), holes (1-3 MiB blocks among
# 10 000 free runs), rounds (700 MB of small, medium and large blocks freed
# and made again), vectors (buffers doubled by realloc on two threads),
# strings (20 000 strings appended to and dropped at random),
# prodcons and churn, on glibc, jemalloc, tcmalloc, mimalloc, pm-0 and
# pm: time and peak RSS against glibc and against the faster of tcmalloc
# and mimalloc, and profiling's cost (pm / pm-0).
#
# Usage: bench/targets.sh [-b DIR] [-p SO] [-c SO] [-r ROUNDS] [-n STEPS] [-w core|sizes|all]
#   -b DIR    built workloads (default build/bench)
#   -p SO     libprofmalloc.so (default build/libprofmalloc.so)
#   -c SO     the ceiling allocator (default DIR/libceiling.so)
#   -r N      rounds (default 9); every round runs each workload on every
#             allocator back to back in a random order, and ratios are taken
#             within a round (the median of them is printed), so slow phases
#             of a shared machine hit the runs compared alike
#   -n N      churn steps per thread (default 20000000)
#   -w WHICH  core (the first table), sizes (the second) or all (default)
# Prints a Markdown table of medians and ratios on stdout; progress on stderr.
#
# Allocators: glibc, pm (default sample rate), pm-0 (profiling off),
# tcmalloc and mimalloc when installed, and "ceiling" (bench/tools/
# ceiling.c: per-thread LIFO lists, no metadata, no checks) on churn only.
# Ceiling's time is what churn costs with an allocator that does nothing,
# so glibc/ceiling is the highest ratio any allocator can reach there, and
# its two-thread scaling is the machine's.
#
# Every workload runs twice: checked (the default: every block gets a header
# and a tail byte, checked at free) and bare (-m bare: malloc and free only,
# blocks untouched).  Checked is what a broken allocator fails and what a
# program that uses its memory sees; bare is the allocator's own throughput,
# without the workload's cache misses on top (on checked churn even the
# do-nothing ceiling stays near 2.2x glibc on our 2-core VM).
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root" || exit 1

BIN=build/bench
PM_SO=build/libprofmalloc.so
CEIL=
ROUNDS=9
STEPS=20000000
WHICH=all
while getopts "b:p:c:r:n:w:h" opt; do
    case $opt in
    b) BIN=$OPTARG ;;
    p) PM_SO=$OPTARG ;;
    c) CEIL=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    n) STEPS=$OPTARG ;;
    w) WHICH=$OPTARG ;;
    h) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) exit 64 ;;
    esac
done
[ -n "$CEIL" ] || CEIL=$BIN/libceiling.so
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "targets.sh: -r needs a positive number" >&2; exit 64; }
for f in "$BIN/churn" "$BIN/prodcons" "$PM_SO" "$CEIL"; do
    [ -e "$f" ] || { echo "targets.sh: $f missing (run make bench-progs)" >&2; exit 1; }
done

. "$here/find-lib.sh"
declare -A PRE
ALLOCS=(glibc pm pm-0)
PRE[glibc]=
PRE[pm]=$PM_SO
PRE[pm-0]=$PM_SO
for a in tcmalloc:libtcmalloc_minimal.so.4 mimalloc:libmimalloc.so.2; do
    p=$(find_lib "${a#*:}")
    if [ -n "$p" ]; then ALLOCS+=("${a%%:*}"); PRE[${a%%:*}]=$p
    else echo "targets.sh: ${a%%:*} not installed, skipped" >&2; fi
done
ALLOCS+=(ceiling)
PRE[ceiling]=$CEIL

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pmtargets.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

run() { # alloc workload args... -> appends "seconds rss" to $tmp/alloc.workload
    local a=$1 w=$2 out
    shift 2
    local rate=
    [ "$a" = pm-0 ] && rate=0
    out=$(env ${rate:+PROFMALLOC_SAMPLE_RATE=$rate} ${PRE[$a]:+LD_PRELOAD=${PRE[$a]}} \
        "$BIN/$1" "${@:2}" 2>"$tmp/err") || {
        echo "targets.sh: $a $w failed: $(head -c 300 "$tmp/err")" >&2
        return 1
    }
    awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
         END { print v["seconds"], v["peak_rss_kb"] }' <<<"$out" >>"$tmp/$a.$w"
}

status=0
case $WHICH in core|sizes|all) ;; *) echo "targets.sh: -w core|sizes|all" >&2; exit 64 ;; esac
[ $WHICH = sizes ] && ROUNDS_CORE=0 || ROUNDS_CORE=$ROUNDS
# Each workload runs on every allocator back to back, in a new random order
# each round: the machine's slow phases last seconds, so the runs compared
# with each other are close in time, and no allocator always follows the same
# one.  Ratios are taken within a round and their median reported.
order() { printf '%s\n' "${ALLOCS[@]}" | { shuf 2>/dev/null || cat; }; }
for ((r = 1; r <= ROUNDS_CORE; r++)); do
    echo "targets.sh: round $r/$ROUNDS" >&2
    for m in checked bare; do
        mode=()
        [ $m = bare ] && mode=(-m bare)
        for w in churn1 churn2 prodcons; do
            for a in $(order); do
                case $w in
                churn1) run "$a" $w.$m churn -t 1 -n "$STEPS" "${mode[@]}" || status=1 ;;
                churn2) run "$a" $w.$m churn -t 2 -n "$STEPS" "${mode[@]}" || status=1 ;;
                prodcons) [ "$a" = ceiling ] || run "$a" $w.$m prodcons "${mode[@]}" || status=1 ;;
                esac
            done
        done
    done
done

med() { # file column -> median
    [ -s "$1" ] || { echo nan; return; }
    awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# pmed FILE_A COL_A FILE_B COL_B K -> median over rounds of K * a / b, where
# line i of each file is round i's run ("–" when either is missing)
pmed() {
    { [ -s "$1" ] && [ -s "$3" ]; } || { echo "–"; return; }
    paste -d' ' <(awk -v c="$2" '{ print $c }' "$1") <(awk -v c="$4" '{ print $c }' "$3") |
        awk -v k="$5" '$1 > 0 && $2 > 0 { print k * $1 / $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (!NR) print "–"; else printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
if [ $ROUNDS_CORE -gt 0 ]; then
declare -A T
for a in "${ALLOCS[@]}"; do
    for w in churn1 churn2 prodcons; do
        for m in checked bare; do
            T[$a.$w.$m]=$(med "$tmp/$a.$w.$m" 1)
        done
    done
done

echo "Medians of $ROUNDS rounds (each workload on every allocator back to back, in"
echo "random order); ratios are per round, then the median. \`bench/targets.sh -r $ROUNDS -n $STEPS\`,"
echo "$(date -u +%Y-%m-%d), $(nproc) CPUs, $(ldd --version 2>&1 | head -1 | sed 's/.* //;s/^/glibc /')."
for m in checked bare; do
    echo
    echo "**$m** workloads:"
    echo
    echo "| allocator | churn s | churn ×glibc | 2-thread churn s | 2-thr scaling | prodcons s | prodcons ×glibc | RSS churn | RSS 2-thr | RSS prodcons |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for a in "${ALLOCS[@]}"; do
        f=$tmp/$a g=$tmp/glibc
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$a" \
            "${T[$a.churn1.$m]}" "$(pmed "$g.churn1.$m" 1 "$f.churn1.$m" 1 1)" \
            "${T[$a.churn2.$m]}" "$(pmed "$f.churn1.$m" 1 "$f.churn2.$m" 1 2)" \
            "${T[$a.prodcons.$m]/nan/–}" "$(pmed "$g.prodcons.$m" 1 "$f.prodcons.$m" 1 1)" \
            "$(pmed "$f.churn1.$m" 2 "$g.churn1.$m" 2 1)" \
            "$(pmed "$f.churn2.$m" 2 "$g.churn2.$m" 2 1)" \
            "$(pmed "$f.prodcons.$m" 2 "$g.prodcons.$m" 2 1)"
    done
done
echo
echo "checked: blocks written and checked; bare (-m bare): malloc and free only."
echo "×glibc: glibc's time / the allocator's (throughput ratio, higher is better)."
echo "2-thr scaling: two threads do twice one thread's work; 2 × T(1 thread) / T(2 threads)."
echo "RSS: peak RSS (VmHWM) / glibc's on the same run (lower is better)."
fi

# ---- the whole size range -----------------------------------------------------
if [ $WHICH != core ]; then
    SZ_ALLOCS=(glibc pm pm-0)
    for a in jemalloc:libjemalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4 mimalloc:libmimalloc.so.2; do
        p=$(find_lib "${a#*:}")
        [ -n "$p" ] && { SZ_ALLOCS+=("${a%%:*}"); PRE[${a%%:*}]=$p; }
    done
    SZ_W=(mixed mixed2 medium pages server prodcons churn tide bigtouch aligned bigrepeat large2 holes rounds vectors strings)
    sz_cmd() {
        case $1 in
        mixed) echo "mixed -t 1" ;;
        mixed2) echo "mixed -t 2" ;;
        medium) echo "mixed -m medium" ;;
        pages) echo "mixed -m pages" ;;
        server) echo "server" ;;
        prodcons) echo "prodcons -n 2000000" ;;
        churn) echo "churn -t 1 -n 5000000" ;;
        tide) echo "tide -n 2" ;;
        bigtouch) echo "bigtouch" ;;
        aligned) echo "bigtouch -m aligned" ;;
        bigrepeat) echo "bigrepeat -n 1000" ;;
        large2) echo "large -t 2" ;;
        holes) echo "holes" ;;
        rounds) echo "rounds -n 3" ;;
        vectors) echo "grow -m double -t 2 -l 32 -z 4194304 -n 10" ;;
        strings) echo "strings" ;;
        esac
    }
    for ((r = 1; r <= ROUNDS; r++)); do
        echo "targets.sh: sizes round $r/$ROUNDS" >&2
        for w in "${SZ_W[@]}"; do
            for a in $(printf '%s\n' "${SZ_ALLOCS[@]}" | { shuf 2>/dev/null || cat; }); do
                # shellcheck disable=SC2046
                run "$a" sz.$w $(sz_cmd $w) || status=1
            done
        done
    done
    # bestpeer FILE_PM COL -> per-round pm / min(tcmalloc, mimalloc), median
    bestpeer() {
        local pm=$tmp/$1.sz.$2 tc=$tmp/tcmalloc.sz.$2 mi=$tmp/mimalloc.sz.$2 c=$3
        { [ -s "$pm" ] && [ -s "$tc" ] && [ -s "$mi" ]; } || { echo "–"; return; }
        paste -d' ' <(awk -v c=$c '{ print $c }' "$pm") <(awk -v c=$c '{ print $c }' "$tc") <(awk -v c=$c '{ print $c }' "$mi") |
            awk '{ b = $2 < $3 ? $2 : $3; if (b > 0) print $1 / b }' | sort -g |
            awk '{ v[NR] = $1 } END { if (!NR) print "–"; else printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
    }
    echo
    echo "Whole size range: medians of $ROUNDS rounds (every workload on every allocator"
    echo "back to back, in random order), ratios per round then the median."
    echo "\`bench/targets.sh -w sizes -r $ROUNDS\`, $(date -u +%Y-%m-%d), $(nproc) CPUs."
    echo
    printf '| workload | glibc s |'
    for a in "${SZ_ALLOCS[@]}"; do [ $a = glibc ] || printf ' %s ×glibc |' "$a"; done
    printf ' pm / best peer time | pm / pm-0 time |'
    for a in "${SZ_ALLOCS[@]}"; do [ $a = glibc ] || printf ' RSS %s |' "$a"; done
    echo
    printf '|---|---:|'
    for a in "${SZ_ALLOCS[@]}"; do [ $a = glibc ] || printf -- '---:|'; done
    printf -- '---:|---:|'
    for a in "${SZ_ALLOCS[@]}"; do [ $a = glibc ] || printf -- '---:|'; done
    echo
    for w in "${SZ_W[@]}"; do
        g=$tmp/glibc.sz.$w
        printf '| %s | %s |' "$w" "$(med "$g" 1)"
        for a in "${SZ_ALLOCS[@]}"; do [ $a = glibc ] || printf ' %s |' "$(pmed "$g" 1 "$tmp/$a.sz.$w" 1 1)"; done
        printf ' %s | %s |' "$(bestpeer pm $w 1)" "$(pmed "$tmp/pm.sz.$w" 1 "$tmp/pm-0.sz.$w" 1 1)"
        for a in "${SZ_ALLOCS[@]}"; do [ $a = glibc ] || printf ' %s |' "$(pmed "$tmp/$a.sz.$w" 2 "$g" 2 1)"; done
        echo
    done
    echo
    echo "×glibc: glibc's time / the allocator's (higher is better).  pm / best peer: pm's time over"
    echo "the faster of tcmalloc and mimalloc in the same round (lower is better; target <= 1.05)."
    echo "pm / pm-0: the default sample rate's cost (target <= 1.02).  RSS: peak RSS / glibc's."
fi
exit $status
