#!/usr/bin/env bash
# bench/run.sh — run the bench/ workloads under several allocators and write
# doc/benchmarks.md plus SVG charts.  bash + awk only (no python).
#
# Usage: bench/run.sh [options]
#   -b DIR     directory holding the built workloads   (default build/bench)
#   -p SO      profmalloc shared object                (default build/libprofmalloc.so)
#   -w LIST    workloads, comma/space separated        (default: all)
#   -a LIST    allocators, comma/space separated       (default: all)
#   -r N       repetitions                             (default 5; quick: 1)
#   -t N       threads for the multi-threaded workloads (default 2)
#   -q         quick mode: small sizes, a smoke test (< 1 min)
#   -o DIR     output dir: DIR/benchmarks.md and DIR/img/*.svg
#              (default doc; quick mode: build/bench-quick)
#   -T SEC     time limit of one run                   (default 120)
#   -h         this help
# Workloads: fastpath churn churn-mt larson prodcons threadchurn realloc
#            grow vectors large large-mt bigmix frag replay pythreads pyrounds mixed mixed-mt
#            medium pages server tide bigtouch aligned bigrepeat holes rounds thrash scratch
#            trade strings
# Allocators: glibc jemalloc tcmalloc mimalloc pm-0 pm pm-64k pm-1
#            (pm = profmalloc with the default sample rate; pm-N sets
#            PROFMALLOC_SAMPLE_RATE=N) and the profiling peers
#            jemalloc-prof tcmalloc-heapprof heaptrack.
# Exact tracers (heaptrack, pm-1, tcmalloc-heapprof) run on reduced sizes
# ("@small" cells) next to their un-profiled baseline at the same size.
# Exit status: 0, or 1 if any run failed (crash, wrong contents, no result).
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

BIN=build/bench
PM_SO=build/libprofmalloc.so
WORKLOADS_ALL="fastpath churn churn-mt larson prodcons threadchurn realloc grow vectors large large-mt bigmix frag replay pythreads pyrounds
    mixed mixed-mt medium pages server tide bigtouch aligned bigrepeat holes rounds thrash scratch trade strings"
WORKLOADS_ALL=$(echo $WORKLOADS_ALL) # one line: the name checks match " name "
ALLOCS_MAIN="glibc jemalloc tcmalloc mimalloc pm-0 pm pm-64k pm-1"
ALLOCS_PROF="jemalloc-prof tcmalloc-heapprof heaptrack"
WORKLOADS=$WORKLOADS_ALL
ALLOCS="$ALLOCS_MAIN $ALLOCS_PROF"
REPS=
THREADS=2
QUICK=0
OUT=
TLIMIT=120
SMALL_ALLOCS="heaptrack pm-1 tcmalloc-heapprof"   # run on reduced sizes

usage() { sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

cmdline="bench/run.sh"
for a in "$@"; do cmdline+=" ${a#"$root"/}"; done

while getopts "b:p:w:a:r:t:qo:T:h" opt; do
    case $opt in
    b) BIN=$OPTARG ;;
    p) PM_SO=$OPTARG ;;
    w) WORKLOADS=${OPTARG//,/ } ;;
    a) ALLOCS=${OPTARG//,/ } ;;
    r) REPS=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    q) QUICK=1 ;;
    o) OUT=$OPTARG ;;
    T) TLIMIT=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 64 ;;
    esac
done
[ -n "$REPS" ] || { [ $QUICK = 1 ] && REPS=1 || REPS=5; }
[ -n "$OUT" ] || { [ $QUICK = 1 ] && OUT=build/bench-quick || OUT=doc; }
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -r needs a positive number" >&2; exit 64; }
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -t needs a positive number" >&2; exit 64; }

cd "$root" || exit 1
for w in $WORKLOADS; do
    case " $WORKLOADS_ALL " in *" $w "*) ;; *) echo "run.sh: unknown workload '$w' (known: $WORKLOADS_ALL)" >&2; exit 64 ;; esac
done
for a in $ALLOCS; do
    case " $ALLOCS_MAIN $ALLOCS_PROF " in *" $a "*) ;; *) echo "run.sh: unknown allocator '$a' (known: $ALLOCS_MAIN $ALLOCS_PROF)" >&2; exit 64 ;; esac
done

note() { echo "run.sh: $*" >&2; NOTES+=("$*"); }
NOTES=()

# ---- locate the allocators ------------------------------------------------
. "$here/find-lib.sh"
declare -A LIB HINT
LIB[jemalloc]=$(find_lib libjemalloc.so.2);          HINT[jemalloc]="apt-get install libjemalloc2"
LIB[tcmalloc]=$(find_lib libtcmalloc_minimal.so.4);  HINT[tcmalloc]="apt-get install libtcmalloc-minimal4"
LIB[mimalloc]=$(find_lib libmimalloc.so.2);          HINT[mimalloc]="apt-get install libmimalloc2.0"
LIB[tcmalloc-full]=$(find_lib libtcmalloc.so.4);     HINT[tcmalloc-heapprof]="apt-get install libgoogle-perftools4"
HINT[heaptrack]="apt-get install heaptrack"
HINT[pm]="make (build $PM_SO)"

available() { # allocator -> 0 if it can run
    case $1 in
    glibc) return 0 ;;
    jemalloc|tcmalloc|mimalloc) [ -n "${LIB[$1]}" ] ;;
    jemalloc-prof) [ -n "${LIB[jemalloc]}" ] && [ "$JE_PROF" = yes ] ;;
    tcmalloc-heapprof) [ -n "${LIB[tcmalloc-full]}" ] ;;
    heaptrack) command -v heaptrack >/dev/null 2>&1 ;;
    pm|pm-*) [ -f "$PM_SO" ] ;;
    esac
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pmbench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/run"

JE_PROF=no
if [ -n "${LIB[jemalloc]}" ]; then
    env -u MALLOC_CONF LD_PRELOAD="${LIB[jemalloc]}" MALLOC_CONF="prof:true,prof_prefix:$tmp/run/jeprof" \
        /bin/ls / >/dev/null 2>"$tmp/jeprof.err"
    if grep -qiE 'invalid conf|prof.*(disabled|not supported|unsupported)' "$tmp/jeprof.err"; then
        JE_PROF=no
    else
        JE_PROF=yes
    fi
fi

SELECTED=()
for a in $ALLOCS; do
    if available "$a"; then
        SELECTED+=("$a")
    elif [ "$a" = jemalloc-prof ] && [ -n "${LIB[jemalloc]}" ]; then
        note "skipped jemalloc-prof: Debian's libjemalloc2 here was built without profiling (MALLOC_CONF=prof:true rejected: $(head -c 120 "$tmp/jeprof.err" | tr '\n' ' '))"
    else
        h=${HINT[$a]:-${HINT[${a%%-*}]:-}}
        note "skipped $a: not installed (${h:-see bench/README})"
    fi
done
[ ${#SELECTED[@]} -gt 0 ] || { echo "run.sh: no allocator available" >&2; exit 1; }

# ---- workloads ---------------------------------------------------------------
pcs=$(( THREADS / 2 )); [ $pcs -ge 1 ] || pcs=1
TRACE_GZ=bench/traces/gxx-cc1plus.trace.gz
wl_cmd() { # workload size(full|small|quick) -> "binary args"
    local w=$1 s=$2
    [ $QUICK = 1 ] && s=quick
    case $w:$s in
    fastpath:full)     echo "fastpath" ;;
    fastpath:small)    echo "fastpath -n 200000" ;;
    fastpath:quick)    echo "fastpath -n 20000" ;;
    churn:full)        echo "churn -t 1" ;;
    churn:small)       echo "churn -t 1 -n 500000" ;;
    churn:quick)       echo "churn -t 1 -n 100000" ;;
    churn-mt:full)     echo "churn -t $THREADS" ;;
    churn-mt:small)    echo "churn -t $THREADS -n 500000" ;;
    churn-mt:quick)    echo "churn -t $THREADS -n 100000" ;;
    larson:full)       echo "larson -t $THREADS" ;;
    larson:small)      echo "larson -t $THREADS -n 3" ;;
    larson:quick)      echo "larson -t $THREADS -n 2 -b 20000" ;;
    prodcons:full)     echo "prodcons -t $pcs" ;;
    prodcons:small)    echo "prodcons -t $pcs -n 300000" ;;
    prodcons:quick)    echo "prodcons -t $pcs -n 50000" ;;
    threadchurn:full)  echo "threadchurn -t $THREADS" ;;
    threadchurn:small) echo "threadchurn -t $THREADS -n 300" ;;
    threadchurn:quick) echo "threadchurn -t $THREADS -n 100" ;;
    realloc:full)      echo "realloc" ;;
    realloc:small)     echo "realloc -n 1 -l 150" ;;
    realloc:quick)     echo "realloc -n 1 -l 40" ;;
    grow:full)         echo "grow" ;;
    grow:small)        echo "grow -n 1 -l 4 -z 4194304" ;;
    grow:quick)        echo "grow -n 1 -l 2 -z 2097152" ;;
    vectors:full)      echo "grow -m double -t $THREADS -l 32 -z 4194304 -n 10" ;;
    vectors:small)     echo "grow -m double -t $THREADS -l 32 -z 4194304 -n 2" ;;
    vectors:quick)     echo "grow -m double -t $THREADS -l 4 -z 2097152 -n 1" ;;
    large:full)        echo "large" ;;
    large:small)       echo "large -n 300" ;;
    large:quick)       echo "large -n 60" ;;
    large-mt:full)     echo "large -t $THREADS" ;;
    large-mt:small)    echo "large -t $THREADS -n 300" ;;
    large-mt:quick)    echo "large -t $THREADS -n 60" ;;
    bigmix:full)       echo "bigmix" ;;
    bigmix:small)      echo "bigmix -n 3000 -l 128" ;;
    bigmix:quick)      echo "bigmix -n 500 -l 64" ;;
    frag:full)         echo "frag" ;;
    frag:small)        echo "frag -n 20 -l 10" ;;
    frag:quick)        echo "frag -n 5 -l 3" ;;
    replay:full)       echo "replay -n 20 $tmp/trace" ;;
    replay:small)      echo "replay -n 2 $tmp/trace" ;;
    replay:quick)      echo "replay -n 1 -l 100000 $tmp/trace" ;;
    pythreads:full)    echo "pythreads -t $THREADS" ;;
    pythreads:small)   echo "pythreads -t $THREADS -n 1500" ;;
    pythreads:quick)   echo "pythreads -t $THREADS -n 300" ;;
    pyrounds:full)     echo "pyrounds" ;;
    pyrounds:small)    echo "pyrounds -r 2" ;;
    pyrounds:quick)    echo "pyrounds -r 1" ;;
    mixed:full)        echo "mixed -t 1" ;;
    mixed:small)       echo "mixed -t 1 -n 500000" ;;
    mixed:quick)       echo "mixed -t 1 -n 100000 -l 4096" ;;
    mixed-mt:full)     echo "mixed -t $THREADS" ;;
    mixed-mt:small)    echo "mixed -t $THREADS -n 500000" ;;
    mixed-mt:quick)    echo "mixed -t $THREADS -n 100000 -l 4096" ;;
    medium:full)       echo "mixed -m medium" ;;
    medium:small)      echo "mixed -m medium -n 200000" ;;
    medium:quick)      echo "mixed -m medium -n 20000 -l 512" ;;
    pages:full)        echo "mixed -m pages" ;;
    pages:small)       echo "mixed -m pages -n 200000 -l 4096" ;;
    pages:quick)       echo "mixed -m pages -n 20000 -l 512" ;;
    server:full)       echo "server -t $pcs" ;;
    server:small)      echo "server -t $pcs -n 20000" ;;
    server:quick)      echo "server -t $pcs -n 5000" ;;
    tide:full)         echo "tide" ;;
    tide:small)        echo "tide -n 1 -z 67108864" ;;
    tide:quick)        echo "tide -n 1 -z 33554432" ;;
    bigtouch:full)     echo "bigtouch" ;;
    bigtouch:small)    echo "bigtouch -n 20000" ;;
    bigtouch:quick)    echo "bigtouch -n 5000" ;;
    aligned:full)      echo "bigtouch -m aligned" ;;
    aligned:small)     echo "bigtouch -m aligned -n 20000" ;;
    aligned:quick)     echo "bigtouch -m aligned -n 5000" ;;
    bigrepeat:full)    echo "bigrepeat" ;;
    bigrepeat:small)   echo "bigrepeat -n 200" ;;
    bigrepeat:quick)   echo "bigrepeat -n 50" ;;
    holes:full)        echo "holes" ;;
    holes:small)       echo "holes -n 30000 -l 8000" ;;
    holes:quick)       echo "holes -n 5000 -l 2000" ;;
    rounds:full)       echo "rounds" ;;
    rounds:small)      echo "rounds -n 2" ;;
    rounds:quick)      echo "rounds -n 1 -z 20" ;;
    thrash:full)       echo "falseshare -m thrash -t $THREADS" ;;
    thrash:small)      echo "falseshare -m thrash -t $THREADS -n 4000" ;;
    thrash:quick)      echo "falseshare -m thrash -t $THREADS -n 500" ;;
    scratch:full)      echo "falseshare -m scratch -t $THREADS" ;;
    scratch:small)     echo "falseshare -m scratch -t $THREADS -n 4000" ;;
    scratch:quick)     echo "falseshare -m scratch -t $THREADS -n 500" ;;
    trade:full)        echo "trade -t $THREADS" ;;
    trade:small)       echo "trade -t $THREADS -n 800000" ;;
    trade:quick)       echo "trade -t $THREADS -n 100000" ;;
    strings:full)      echo "strings" ;;
    strings:small)     echo "strings -n 500000" ;;
    strings:quick)     echo "strings -n 100000 -l 4000" ;;
    esac
}

SEL_W=()
for w in $WORKLOADS; do
    b=$(wl_cmd "$w" full); b=${b%% *}
    if [ ! -x "$BIN/$b" ]; then
        note "skipped workload $w: $BIN/$b not built (run make bench)"
        continue
    fi
    if [ $w = pythreads -o $w = pyrounds ] && ! command -v python3 >/dev/null 2>&1; then
        note "skipped workload $w: no python3"
        continue
    fi
    if [ $w = replay ]; then
        if [ ! -f "$TRACE_GZ" ] || ! gzip -dc "$TRACE_GZ" >"$tmp/trace" 2>/dev/null; then
            note "skipped workload replay: $TRACE_GZ missing or unreadable"
            continue
        fi
    fi
    SEL_W+=("$w")
done
[ ${#SEL_W[@]} -gt 0 ] || { echo "run.sh: no workload to run" >&2; exit 1; }

# cells: allocator@size; exact tracers run small, next to their baseline
base_of() { case $1 in pm|pm-64k|pm-1) echo pm-0 ;; jemalloc-prof) echo jemalloc ;; tcmalloc-heapprof) echo tcmalloc ;; heaptrack) echo glibc ;; esac; }
CELLS=()
add_cell() { local c; for c in "${CELLS[@]}"; do [ "$c" = "$1" ] && return; done; CELLS+=("$1"); }
for a in "${SELECTED[@]}"; do
    case " $SMALL_ALLOCS " in
    *" $a "*)
        b=$(base_of "$a")
        if [ $QUICK = 0 ] && available "$b"; then add_cell "$b@small"; fi
        if [ $QUICK = 0 ]; then add_cell "$a@small"; else add_cell "$a"; fi ;;
    *) add_cell "$a" ;;
    esac
done
# in quick mode everything is small already: the tracers' baselines are plain cells
if [ $QUICK = 1 ]; then
    for a in "${SELECTED[@]}"; do
        case " $SMALL_ALLOCS " in *" $a "*) b=$(base_of "$a"); available "$b" && add_cell "$b" ;; esac
    done
fi

# ---- run -----------------------------------------------------------------------
RES="$tmp/results.tsv"
: >"$RES"
mkdir -p "$OUT/img" "$BIN" || exit 1
LOG="$BIN/run-$( [ $QUICK = 1 ] && echo quick || echo full ).log"
: >"$LOG"
total=$(( REPS * ${#SEL_W[@]} * ${#CELLS[@]} ))
i=0
failed=0
clean_env=(env -u LD_PRELOAD -u MALLOC_CONF -u HEAPPROFILE -u PROFMALLOC_SAMPLE_RATE -u PROFMALLOC_DUMP
           -u PROFMALLOC_UNWIND -u PROFMALLOC_TCACHE_BYTES -u PROFMALLOC_VERBOSE -u TCMALLOC_SAMPLE_PARAMETER
           -u GLIBC_TUNABLES -u MIMALLOC_VERBOSE)
pm_abs=$(cd "$(dirname "$PM_SO")" 2>/dev/null && pwd)/$(basename "$PM_SO")
bin_abs=$(cd "$BIN" && pwd)

run_cell() { # rep workload cell
    local rep=$1 w=$2 cell=$3 a=${3%@small} size=full
    [ "$a" != "$cell" ] && size=small
    local -a cmd=()
    read -r -a wl <<<"$(wl_cmd "$w" $size)"
    wl[0]="$bin_abs/${wl[0]}"
    case $a in
    glibc)    cmd=("${clean_env[@]}") ;;
    jemalloc|tcmalloc|mimalloc) cmd=("${clean_env[@]}" LD_PRELOAD="${LIB[$a]}") ;;
    jemalloc-prof) cmd=("${clean_env[@]}" LD_PRELOAD="${LIB[jemalloc]}"
                        MALLOC_CONF="prof:true,lg_prof_sample:19,prof_prefix:$tmp/run/prof/jeprof") ;;
    tcmalloc-heapprof) cmd=("${clean_env[@]}" LD_PRELOAD="${LIB[tcmalloc-full]}" HEAPPROFILE="$tmp/run/prof/heap") ;;
    heaptrack) cmd=("${clean_env[@]}" heaptrack -o "$tmp/run/prof/heaptrack") ;;
    pm)       cmd=("${clean_env[@]}" LD_PRELOAD="$pm_abs") ;;
    pm-64k)   cmd=("${clean_env[@]}" LD_PRELOAD="$pm_abs" PROFMALLOC_SAMPLE_RATE=65536) ;;
    pm-*)     cmd=("${clean_env[@]}" LD_PRELOAD="$pm_abs" PROFMALLOC_SAMPLE_RATE="${a#pm-}") ;;
    esac
    mkdir -p "$tmp/run/prof"
    local t0 t1 rc line status=ok
    t0=$(date +%s.%N)
    (cd "$tmp/run" && timeout -k 5 "$TLIMIT" "${cmd[@]}" "${wl[@]}") >"$tmp/out" 2>"$tmp/err"
    rc=$?
    t1=$(date +%s.%N)
    line=$(grep -m1 '^workload=' "$tmp/out")
    if [ $rc = 124 ] || [ $rc = 137 ]; then
        status=TIMEOUT
    elif [ $rc != 0 ] || [ -z "$line" ] || ! [[ $line =~ \ seconds=[0-9] ]]; then
        status=FAIL
    fi
    if [ $status != ok ]; then
        [ $status = FAIL ] && failed=1
        echo "run.sh: $status: $w × $cell (rep $rep): exit $rc: $(tail -c 300 "$tmp/err" | tr '\n' ' ')" >&2
    fi
    { echo "== rep $rep $w $cell: ${cmd[*]} ${wl[*]} -> rc=$rc $status wall=$(awk -v a=$t0 -v b=$t1 'BEGIN { printf "%.2f", b - a }')s"; cat "$tmp/out" "$tmp/err"; } >>"$LOG"
    printf '%s\t%s\t%s\t%s\t%s\n' "$rep" "$w" "$cell" "$status" "$line" >>"$RES"
    rm -rf "$tmp/run/prof" "$tmp/run"/*.heap "$tmp/run"/jeprof* 2>/dev/null
}

t_start=$(date +%s)
ncell=${#CELLS[@]}
for ((rep = 1; rep <= REPS; rep++)); do
    for w in "${SEL_W[@]}"; do
        # round-robin, with the starting allocator rotated every repetition
        for ((k = 0; k < ncell; k++)); do
            cell=${CELLS[$(( (k + rep - 1) % ncell ))]}
            i=$((i + 1))
            printf '[%d/%d] %s × %s (rep %d/%d)\n' "$i" "$total" "$w" "$cell" "$rep" "$REPS" >&2
            run_cell "$rep" "$w" "$cell"
        done
    done
done
elapsed=$(( $(date +%s) - t_start ))
cp "$RES" "$BIN/results-$( [ $QUICK = 1 ] && echo quick || echo full ).tsv"

# ---- report ----------------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
glibc_v=$(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | head -1)
pkgv() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || echo "?"; }
pm_rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "uncommitted")
md="$OUT/benchmarks.md"
{
    echo "# profmalloc benchmarks"
    echo
    echo "Generated by \`bench/run.sh\` (\`make bench\`); do not edit by hand."
    echo
    echo "| | |"
    echo "| --- | --- |"
    echo "| command | \`$cmdline\` |"
    echo "| date | $(date -u '+%Y-%m-%d %H:%M UTC') |"
    echo "| CPU | $cpu, $(nproc) cores (nproc) |"
    echo "| kernel | $(uname -sr) |"
    echo "| glibc | $glibc_v |"
    echo "| peers | jemalloc $(pkgv libjemalloc2), tcmalloc $(pkgv libtcmalloc-minimal4), mimalloc $(pkgv libmimalloc2.0), gperftools $(pkgv libgoogle-perftools4), heaptrack $(pkgv heaptrack) |"
    echo "| profmalloc | git $pm_rev |"
    echo "| repetitions | $REPS per cell, allocators round-robin within each repetition; median shown, (min–max) spread |"
    echo "| mode | $( [ $QUICK = 1 ] && echo "quick (smoke-test sizes: numbers are not meaningful)" || echo full), $THREADS threads for multi-threaded workloads, run time ${elapsed} s |"
    echo
    echo "Allocators: **glibc** (no preload); **jemalloc**, **tcmalloc** (tcmalloc_minimal), **mimalloc** via"
    echo "LD_PRELOAD of Debian's packages; **pm** = profmalloc with the default sample rate (512 KiB),"
    echo "**pm-0** profiling off, **pm-64k** PROFMALLOC_SAMPLE_RATE=65536, **pm-1** every allocation recorded."
    echo "Time is the workload's own timed region (wall clock); RSS is VmHWM read by the workload at exit."
    echo "Lower is better everywhere; a ratio < 1 means faster / smaller than the reference."
    echo "FAIL = the run crashed or a content check failed; TIMEOUT = over ${TLIMIT} s."
    echo
    if [ ${#NOTES[@]} -gt 0 ]; then
        echo "Notes from this run:"
        echo
        for n in "${NOTES[@]}"; do echo "- $n"; done
        echo
    fi
    awk -F'\t' -v mode=md -v workloads="${SEL_W[*]}" -v cells="${CELLS[*]}" -v jeprof="$JE_PROF" \
        -v quick="$QUICK" -v img="img" -f "$here/report.awk" "$RES"
    echo
    echo "## Workloads"
    echo
    for w in "${SEL_W[@]}"; do
        b=$(wl_cmd "$w" full); b=${b%% *}
        src=bench/$b.c
        [ -f "$src" ] || src=bench/$b.py
        desc=$(awk 'NR<=2 && sub(/^(\/\*|""")[ ]*[a-z]+ — /, "") { sub(/\.$/, ""); print; exit }' "$src")
        [ $w = churn-mt ] && desc="churn with $THREADS threads, each an independent churn of the same size (scaling check)"
        [ $w = large-mt ] && desc="large with $THREADS threads at once, each its own live blocks (the page heap's lock)"
        [ $w = mixed-mt ] && desc="mixed with $THREADS threads, each its own table of live blocks"
        [ $w = thrash ] && desc="$THREADS threads each reusing an 8-byte block of its own, written 1 000 times a round (false sharing between the threads' blocks)"
        [ $w = scratch ] && desc="thrash, but each thread first frees an 8-byte block the main thread made next to the others' (false sharing through a freed block)"
        [ $w = vectors ] && desc="grow -m double with $THREADS threads: each doubles 32 buffers of its own in turn, to 1-4 MiB (vectors and slices; the old copies realloc leaves)"
        [ $w = aligned ] && desc="bigtouch -m aligned: the blocks from posix_memalign on 64 KiB-2 MiB"
        [ $w = medium ] && desc="mixed -m medium: medium blocks only (1 KiB - 256 KiB, log-uniform), 4 096 live"
        [ $w = pages ] && desc="mixed -m pages: blocks of one to sixteen 4 KiB pages only (4-64 KiB, uniform), 16 384 live, header and tail touched"
        args="\`$(wl_cmd "$w" full | sed "s|$tmp/trace|TRACE|")\`"
        [ $QUICK = 0 ] && args="$args; reduced: \`$(wl_cmd "$w" small | sed "s|$tmp/trace|TRACE|")\`"
        printf -- '- **%s** (%s): %s\n' "$w" "$args" "$desc"
    done
    [[ " ${SEL_W[*]} " == *" replay "* ]] && echo "  TRACE = bench/traces/gxx-cc1plus.trace.gz, decompressed."
    echo
    echo "Each workload's header comment (bench/*.c, bench/*.py) says what it stresses and why."
    echo "Instruction counts per malloc+free pair (repeatable where wall time is not):"
    echo "\`bench/count-instructions.sh\`."
} >"$md.tmp" && mv "$md.tmp" "$md"
awk -F'\t' -v mode=svg_time -v workloads="${SEL_W[*]}" -v cells="${CELLS[*]}" -f "$here/report.awk" "$RES" >"$OUT/img/benchmarks-time.svg"
awk -F'\t' -v mode=svg_rss -v workloads="${SEL_W[*]}" -v cells="${CELLS[*]}" -f "$here/report.awk" "$RES" >"$OUT/img/benchmarks-rss.svg"
echo "run.sh: wrote $md, $OUT/img/benchmarks-time.svg, $OUT/img/benchmarks-rss.svg (raw: $BIN/results-*.tsv, log: $LOG) in ${elapsed} s" >&2
exit $failed
