#!/usr/bin/env bash
# bench/realprogs.sh — real programs already on the machine, under glibc and
# under each allocator (LD_PRELOAD): peak RSS and time, as ratios to glibc.
# Every run's output is compared with glibc's; a difference is a failure.
#
# Usage: bench/realprogs.sh [-p SO] [-r ROUNDS]
#   -p SO   libprofmalloc.so (default build/libprofmalloc.so)
#   -r N    rounds (default 3); each round runs every allocator once, in turn
# Prints a Markdown table of medians on stdout; progress on stderr.
#
# Programs (each skipped when missing): gcc compiling src/prof_http.c at -O2;
# python3 building 60 000 dicts of lists of strings, json.dumps, json.loads
# and re.findall; sqlite3 inserting and indexing 50 000 rows in memory;
# git log -p and git grep over this repository (skipped outside a git
# clone); perl building a hash of 200 000 entries; sort of 300 000 lines.
# Allocators: glibc, pm (default sample rate), pm-0 (profiling off),
# tcmalloc and mimalloc when installed.
set -u -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
PM_SO=build/libprofmalloc.so
ROUNDS=3
while getopts "p:r:h" opt; do
    case $opt in
    p) PM_SO=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    *) sed -n '2,/^set -u/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    esac
done
[ -f "$PM_SO" ] || { echo "realprogs.sh: $PM_SO not built (run make)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "realprogs.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
PM_SO=$(cd "$(dirname "$PM_SO")" && pwd)/$(basename "$PM_SO")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

allocs=(glibc pm pm-0)
declare -A lib=([glibc]="" [pm]="$PM_SO" [pm-0]="$PM_SO")
for cand in tcmalloc:libtcmalloc_minimal.so.4 mimalloc:libmimalloc.so.2; do
    for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib /lib/x86_64-linux-gnu; do
        if [ -f "$d/${cand#*:}" ]; then
            allocs+=("${cand%%:*}")
            lib[${cand%%:*}]="$d/${cand#*:}"
            break
        fi
    done
done

# inputs
seq 1 300000 | awk '{print ($1*7919)%100003, "line", $1}' >"$tmp/lines.txt"
{
    echo "create table t(a integer, b text); begin;"
    awk 'BEGIN{for(i=1;i<=50000;i++) printf "insert into t values(%d, %crow%d %s%c);\n", i, 39, i, "xxxxxxxxxxxxxxxxxxxxxx", 39}'
    echo "commit; create index i on t(b); select count(*), sum(length(b)) from t where a % 7 = 3;"
} >"$tmp/rows.sql"
cat >"$tmp/work.py" <<'EOF'
import json, re
d = [{str(i): [str(j) * 3 for j in range(20)]} for i in range(60000)]
s = json.dumps(d)
l = json.loads(s)
print(len(s), len(l), len(re.findall(r"[0-9]+", s)))
EOF

names=() cmds=()
add() { names+=("$1"); cmds+=("$2"); }
command -v gcc >/dev/null && add gcc "gcc -O2 -D_GNU_SOURCE -c src/prof_http.c -Isrc -Iinclude -o $tmp/prof_http.o && echo ok"
command -v python3 >/dev/null && add python3 "python3 $tmp/work.py"
command -v sqlite3 >/dev/null && add sqlite3 "sqlite3 :memory: < $tmp/rows.sql"
if command -v git >/dev/null && git rev-parse --git-dir >/dev/null 2>&1; then
    add "git log" "git log -p --stat -n 60 | cksum"
    add "git grep" "git grep -c -e pm_ -e static \$(git rev-list -n 20 HEAD) | cksum"
fi
command -v perl >/dev/null && add perl "perl -e 'my %h; for my \$i (1..200000) { \$h{\"k\$i\"} = [\$i, \"v\" x (\$i % 50)] } my \$n = 0; \$n += length(\$h{\$_}[1]) for keys %h; print \"\$n\\n\"'"
add sort "sort -n $tmp/lines.txt | cksum"

declare -A T M
fail=0
for ((r = 1; r <= ROUNDS; r++)); do
    echo "realprogs.sh: round $r/$ROUNDS" >&2
    for i in "${!names[@]}"; do
        for a in "${allocs[@]}"; do
            env=()
            [ -n "${lib[$a]}" ] && env+=("LD_PRELOAD=${lib[$a]}")
            [ "$a" = pm-0 ] && env+=("PROFMALLOC_SAMPLE_RATE=0")
            if ! env "${env[@]}" /usr/bin/time -f "%e %M" -o "$tmp/time" bash -c "${cmds[$i]}" >"$tmp/out.$a" 2>/dev/null; then
                echo "realprogs.sh: ${names[$i]} failed under $a" >&2
                fail=1
                continue
            fi
            if [ "$a" != glibc ] && ! cmp -s "$tmp/out.glibc" "$tmp/out.$a"; then
                echo "realprogs.sh: ${names[$i]} printed something else under $a" >&2
                fail=1
            fi
            read -r secs kb <"$tmp/time"
            T[$i,$a]+=" $secs"
            M[$i,$a]+=" $kb"
        done
    done
done

med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "nan"}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0 && a == a + 0) printf "%.2f", a / b; else printf "–"}'; }

echo "Medians of $ROUNDS alternated rounds; \`bench/realprogs.sh -r $ROUNDS\`, $(date +%F), $(nproc) CPUs."
echo
printf '| program | glibc peak RSS | glibc s |'
for a in "${allocs[@]:1}"; do printf ' %s RSS ×glibc | %s time ×glibc |' "$a" "$a"; done
echo
printf '|---|---:|---:|'
for a in "${allocs[@]:1}"; do printf -- '---:|---:|'; done
echo
for i in "${!names[@]}"; do
    gm=$(med "${M[$i,glibc]:-}") gt=$(med "${T[$i,glibc]:-}")
    printf '| %s | %s MB | %s |' "${names[$i]}" "$(awk -v k="$gm" 'BEGIN {printf "%.1f", k / 1024}')" "$gt"
    for a in "${allocs[@]:1}"; do
        printf ' %s | %s |' "$(ratio "$(med "${M[$i,$a]:-}")" "$gm")" "$(ratio "$(med "${T[$i,$a]:-}")" "$gt")"
    done
    echo
done
echo
echo "RSS: peak RSS (maximum resident set of the whole run, /usr/bin/time %M) over glibc's; time: wall time over glibc's."
exit $fail
