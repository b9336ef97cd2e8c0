#!/usr/bin/env bash
# bench/cpustat.sh — CPU time, page faults and peak RSS of workloads under
# each allocator, from perf stat (task-clock, page-faults) and the
# workload's own peak_rss_kb: on a shared or loaded machine, where wall
# time swings by 2x between runs, CPU time and faults still compare.
# Every round runs each workload on every allocator back to back, in a new
# random order; the table shows medians over rounds, and ratios to glibc.
#
# Usage: bench/cpustat.sh [-b DIR] [-p SO] [-B SO] [-r ROUNDS] [-R RATE] [WORKLOAD...]
#   -b DIR    built workloads (default build/bench)
#   -p SO     libprofmalloc.so (default build/libprofmalloc.so)
#   -B SO     a second profmalloc build to compare (e.g. before a change): "pm-B"
#   -r N      rounds (default 3)
#   -R RATE   PROFMALLOC_SAMPLE_RATE for pm (default: unset, the default rate);
#             pm-0 (rate 0) always runs too
#   WORKLOAD  "name:command args" (default: the whole-size-range set below)
# Needs perf (linux-perf); prints a Markdown table on stdout.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/.." || exit 1
BIN=build/bench PM_SO=build/libprofmalloc.so PM_B= ROUNDS=3 RATE=
while getopts "b:p:B:r:R:h" opt; do
    case $opt in
    b) BIN=$OPTARG ;; p) PM_SO=$OPTARG ;; B) PM_B=$OPTARG ;; r) ROUNDS=$OPTARG ;; R) RATE=$OPTARG ;;
    h) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) exit 64 ;;
    esac
done
shift $((OPTIND - 1))
command -v perf >/dev/null 2>&1 || { echo "cpustat.sh: perf not installed (apt-get install linux-perf)" >&2; exit 1; }
W=("$@")
[ ${#W[@]} -gt 0 ] || W=("mixed:mixed -n 1000000" "mixed2:mixed -t 2 -n 500000" "medium:mixed -m medium -n 300000"
    "server:server -n 30000" "prodcons:prodcons -n 1000000" "churn:churn -t 1 -n 3000000"
    "tide:tide -n 1" "bigtouch:bigtouch -n 50000" "bigrepeat:bigrepeat -n 500"
    "large:large -n 1000" "bigmix:bigmix -n 3000 -l 128" "grow:grow" "realloc:realloc" "holes:holes -n 30000")
. "$here/find-lib.sh"
declare -A PRE
A=(glibc)
for a in jemalloc:libjemalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4 mimalloc:libmimalloc.so.2; do
    p=$(find_lib "${a#*:}"); [ -n "$p" ] && { A+=("${a%%:*}"); PRE[${a%%:*}]=$p; }
done
A+=(pm-0 pm); PRE[pm-0]=$PM_SO; PRE[pm]=$PM_SO
[ -n "$PM_B" ] && { A+=(pm-B); PRE[pm-B]=$PM_B; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pmcpu.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
    echo "cpustat.sh: round $r/$ROUNDS" >&2
    for w in "${W[@]}"; do
        name=${w%%:*} cmd=${w#*:}
        for a in $(printf '%s\n' "${A[@]}" | { shuf 2>/dev/null || cat; }); do
            envs=(env -u PROFMALLOC_SAMPLE_RATE -u LD_PRELOAD)
            [ -n "${PRE[$a]:-}" ] && envs+=(LD_PRELOAD="${PRE[$a]}")
            [ $a = pm-0 ] && envs+=(PROFMALLOC_SAMPLE_RATE=0)
            [ $a = pm ] && [ -n "$RATE" ] && envs+=(PROFMALLOC_SAMPLE_RATE="$RATE")
            # shellcheck disable=SC2086
            st=$(perf stat -x, -e task-clock,page-faults "${envs[@]}" "$BIN"/$cmd 2>&1 >"$tmp/out") ||
                { echo "cpustat.sh: $name under $a failed" >&2; continue; }
            ms=$(awk -F, '$3 == "task-clock" { print $1 }' <<<"$st")
            pf=$(awk -F, '$3 == "page-faults" { print $1 }' <<<"$st")
            rss=$(grep -o 'peak_rss_kb=[0-9]*' "$tmp/out" | cut -d= -f2)
            echo "$ms $pf $rss" >>"$tmp/$name.$a"
        done
    done
done
med() { awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
printf '| workload |'; for a in "${A[@]}"; do printf ' %s CPU ms (×glibc) |' "$a"; done
for a in "${A[@]}"; do [ $a = glibc ] || printf ' RSS %s |' "$a"; done; echo
printf '|---|'; for a in "${A[@]}"; do printf -- '---:|'; done; for a in "${A[@]}"; do [ $a = glibc ] || printf -- '---:|'; done; echo
for w in "${W[@]}"; do
    name=${w%%:*}
    g=$(med "$tmp/$name.glibc" 1) grss=$(med "$tmp/$name.glibc" 3)
    printf '| %s |' "$name"
    for a in "${A[@]}"; do
        [ -s "$tmp/$name.$a" ] || { printf ' – |'; continue; }
        m=$(med "$tmp/$name.$a" 1)
        printf ' %.0f (%.2f) |' "$m" "$(awk -v g="$g" -v m="$m" 'BEGIN { print (m > 0 ? g / m : 0) }')"
    done
    for a in "${A[@]}"; do
        [ $a = glibc ] && continue
        [ -s "$tmp/$name.$a" ] || { printf ' – |'; continue; }
        printf ' %.2f |' "$(awk -v g="$grss" -v m="$(med "$tmp/$name.$a" 3)" 'BEGIN { print (g > 0 ? m / g : 0) }')"
    done
    echo
done
echo
echo "CPU ms: median task-clock (user + system) over $ROUNDS rounds; (×glibc) = glibc's CPU time / the allocator's,"
echo "higher is better.  RSS: median peak RSS / glibc's.  \`bench/cpustat.sh -r $ROUNDS${PM_B:+ -B BEFORE.so}\`"
