#!/usr/bin/env bash
# run.sh <path-to-libprofmalloc.so>
#
# Runs real programs with and without LD_PRELOAD=<lib> and compares their
# exit codes and outputs (python3 with PYTHONMALLOC=malloc, perl, git,
# sqlite3, gcc, php, a coreutils pipeline).  First checks that the preload is
# really active.  A missing program is skipped.  Ends with the line
# "N passed, N failed, N skipped" and exits non-zero if anything failed.
#
# Environment: PRELOAD_CHECK  the preload_check program (default: <lib dir>/test/preload_check;
#                             compiled on the fly if absent)
#              RUN_TIMEOUT    seconds per command (default 120)
set -u

if [ $# -ne 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 <path-to-libprofmalloc.so>" >&2
    exit 2
fi
SO=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TIMEOUT=${RUN_TIMEOUT:-120}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pm_integration.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset LD_PRELOAD PROFMALLOC_DUMP PROFMALLOC_VERBOSE
export LC_ALL=C

pass=0
fail=0
skip=0

ok()      { pass=$((pass + 1)); echo "PASS $1"; }
bad()     { fail=$((fail + 1)); echo "FAIL $1${2:+: $2}"; }
skipped() { skip=$((skip + 1)); echo "SKIP $1${2:+: $2}"; }
have()    { command -v "$1" >/dev/null 2>&1; }

show() { # file: print at most 15 lines, indented
    sed -n '1,15s/^/    | /p' "$1"
}

# compare NAME 'shell command'
# Runs the command in a fresh directory once without and once with the
# preload (exported to every process of the command) and compares.
compare() {
    local name=$1 cmd=$2 d rc0 rc1
    d=$TMP/$name
    mkdir -p "$d/base" "$d/pm"
    (cd "$d/base" && timeout "$TIMEOUT" bash -c "$cmd") >"$d/out0" 2>"$d/err0"
    rc0=$?
    (cd "$d/pm" && LD_PRELOAD=$SO timeout "$TIMEOUT" bash -c "$cmd") >"$d/out1" 2>"$d/err1"
    rc1=$?
    if [ $rc0 -ne 0 ]; then
        bad "$name" "exit $rc0 even without the preload"
        show "$d/err0"
        return
    fi
    if [ $rc1 -ne 0 ]; then
        bad "$name" "exit $rc1 with the preload (0 without)"
        show "$d/err1"
        return
    fi
    if [ ! -s "$d/out0" ]; then
        bad "$name" "no output"
        return
    fi
    if ! cmp -s "$d/out0" "$d/out1"; then
        bad "$name" "stdout differs with the preload"
        diff "$d/out0" "$d/out1" >"$d/diff"
        show "$d/diff"
        return
    fi
    if ! cmp -s "$d/err0" "$d/err1"; then
        bad "$name" "stderr differs with the preload"
        diff "$d/err0" "$d/err1" >"$d/diff"
        show "$d/diff"
        return
    fi
    ok "$name ($(wc -l <"$d/out0") lines identical)"
}

# ---- the preload is really active -------------------------------------------
CHECK=${PRELOAD_CHECK:-$(dirname "$SO")/test/preload_check}
if [ ! -x "$CHECK" ]; then
    CHECK=$TMP/preload_check
    if ! cc -std=gnu11 -O1 -D_GNU_SOURCE -I"$ROOT/include" -o "$CHECK" \
            "$HERE/preload_check.c" >"$TMP/cc.log" 2>&1; then
        bad preload-check "cannot build preload_check"
        show "$TMP/cc.log"
        CHECK=
    fi
fi
if [ -n "$CHECK" ]; then
    if "$CHECK" >/dev/null 2>&1; then
        bad preload-check "preload_check claims profmalloc without any preload"
    elif out=$(LD_PRELOAD=$SO "$CHECK" 2>&1); then
        ok "preload-check (C program sees profmalloc_get_stats and its counts)"
    else
        bad preload-check "$out"
    fi
fi
if LD_PRELOAD=$SO grep -q -F "/$(basename "$SO")" /proc/self/maps; then
    ok "preload-mapped (library mapped into an exec'd coreutils program)"
else
    bad preload-mapped "$(basename "$SO") not in /proc/self/maps of grep"
fi

# ---- python3 ---------------------------------------------------------------
if have python3; then
    if out=$(LD_PRELOAD=$SO PYTHONMALLOC=malloc python3 -c \
        'import ctypes; print(hasattr(ctypes.CDLL(None), "profmalloc_get_stats"))' 2>&1) &&
        [ "$out" = True ]; then
        ok "python3-preload-active"
    else
        bad python3-preload-active "$out"
    fi
    compare python3 "PYTHONMALLOC=malloc python3 '$HERE/workload.py'"
else
    skipped python3 "not installed"
fi

# ---- perl ------------------------------------------------------------------
if have perl; then
    compare perl "perl '$HERE/workload.pl'"
else
    skipped perl "not installed"
fi

# ---- git -------------------------------------------------------------------
if have git; then
    compare git '
set -e
export HOME=$PWD GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_NAME=pm GIT_AUTHOR_EMAIL=pm@example.org
export GIT_COMMITTER_NAME=pm GIT_COMMITTER_EMAIL=pm@example.org
export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
git init -q -b main repo
cd repo
for i in $(seq 1 30); do
    seq $i 3 20000 > f$((i % 5)).txt
    printf "commit %d\n" $i >> log.txt
    git add -A
    git commit -q -m "commit $i"
done
git log --oneline | head -40
git log --stat --format=%H%n%s | sha256sum
git diff --stat HEAD~10 HEAD | tail -1
git repack -adq
git rev-list --all --objects | wc -l
git grep -c 1999 HEAD -- "*.txt"
git blame -s log.txt | tail -3
git fsck --no-progress --strict 2>&1
'
else
    skipped git "not installed"
fi

# ---- sqlite3 ---------------------------------------------------------------
if have sqlite3; then
    compare sqlite3 '
set -e
{
    echo "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, val REAL);"
    echo "BEGIN;"
    seq 1 10000 | awk "{ printf \"INSERT INTO t(name, grp, val) VALUES (%c%s-%d%c, %d, %f);\n\", 39, substr(\"abcdefghij\", \$1 % 10 + 1, 3), \$1 * 7919 % 10007, 39, \$1 % 37, \$1 / 3.0 }"
    echo "COMMIT;"
    echo "CREATE INDEX t_name ON t(name);"
    echo "SELECT count(*), sum(grp), round(sum(val), 3) FROM t;"
    echo "SELECT grp, count(*), min(name), max(name) FROM t GROUP BY grp ORDER BY grp LIMIT 10;"
    echo "SELECT name FROM t WHERE name LIKE \"%-99%\" ORDER BY name LIMIT 20;"
    echo "SELECT a.grp, count(*) FROM t a JOIN t b ON a.grp = b.grp AND b.id % 100 = 0 GROUP BY a.grp ORDER BY 2 DESC, 1 LIMIT 5;"
    echo "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000) SELECT sum(length(printf(\"%x\", x))) FROM c;"
    echo "SELECT group_concat(name, \",\") IS NOT NULL, length(group_concat(name, \",\")) FROM t;"
    echo "DELETE FROM t WHERE id % 3 = 0; VACUUM; SELECT count(*) FROM t;"
} > script.sql
sqlite3 db.sqlite < script.sql
'
else
    skipped sqlite3 "not installed"
fi

# ---- gcc: compile (cc1 is a heavy malloc user) and run ---------------------
if have gcc; then
    compare gcc '
set -e
cat > prog.c <<EOF
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct node { struct node *next; char name[24]; unsigned v; };
static int cmp(const void *a, const void *b) {
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return (x > y) - (x < y);
}
int main(void) {
    struct node *head = NULL;
    unsigned h = 2166136261u, *arr = malloc(100000 * sizeof *arr);
    for (unsigned i = 0; i < 100000; i++) {
        struct node *n = malloc(sizeof *n);
        n->v = i * 2654435761u;
        snprintf(n->name, sizeof n->name, "n%u", n->v % 9973);
        n->next = head;
        head = n;
        arr[i] = n->v;
    }
    qsort(arr, 100000, sizeof *arr, cmp);
    for (struct node *n = head, *x; n; n = x) {
        x = n->next;
        for (char *c = n->name; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
        free(n);
    }
    printf("%u %u %u\n", h, arr[0], arr[99999]);
    free(arr);
    return 0;
}
EOF
gcc -O2 -Wall -o prog prog.c
./prog
gcc -O0 -g -c prog.c -o prog.o
nm prog.o | awk "{print \$NF}" | sort
'
else
    skipped gcc "not installed"
fi

# ---- php: opens its extensions with RTLD_DEEPBIND (Debian 12's 8.2) ----------
if have php; then
    compare php '
php -r '"'"'
$a = [];
for ($i = 0; $i < 50000; $i++) $a["k$i"] = str_repeat(chr(97 + $i % 26), $i % 40);
ksort($a);
echo count($a), " ", strlen(implode(",", $a)), " ", md5(serialize(array_slice($a, 0, 500))), "\n";
echo count(token_get_all("<?php function f(\$x) { return \$x * 2; } echo f(21);")), "\n";
echo json_encode(array_map(fn($x) => $x * $x, range(1, 10))), "\n";
'"'"'
php -m | sort
'
else
    skipped php "not installed"
fi

# ---- coreutils pipeline ----------------------------------------------------
compare pipeline '
set -e
seq 1 200000 | sort -r | awk "{ s += \$1; if (NR % 20000 == 0) print NR, s, \$1 * 2 }" | sha256sum
seq 1 200000 | awk "{ print (\$1 * 7919) % 100003, \$1 }" | sort -k1,1n -k2,2nr -S 16M --parallel=2 | uniq -c -w 6 | tail -5
seq 1 50000 | sed "s/\(.\)\(.\)/\2\1/" | tr 0-9 a-j | sort -u | wc -l
'

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
