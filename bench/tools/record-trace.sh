#!/usr/bin/env bash
# bench/tools/record-trace.sh — re-record bench/traces/gxx-cc1plus.trace.gz.
# Builds the LD_PRELOAD tracer (bench/tools/trace-malloc.c), compiles
# bench/traces/gxx-cc1plus.cc with g++ -O2 -c under it, takes the trace of
# cc1plus (the largest one), and converts it to replay's compact format:
#   m SIZE | a ALIGN SIZE | f AGE | r AGE SIZE   (AGE = allocations ago)
# Usage: bench/tools/record-trace.sh [output.trace.gz]
set -eu -o pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/traces/gxx-cc1plus.trace.gz}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -shared -fPIC -pthread -o "$tmp/trace-malloc.so" bench/tools/trace-malloc.c -ldl
mkdir "$tmp/tr"
TRACE_DIR="$tmp/tr" LD_PRELOAD="$tmp/trace-malloc.so" g++ -O2 -c bench/traces/gxx-cc1plus.cc -o "$tmp/x.o"
raw=$(ls -S "$tmp"/tr/trace.* | head -1)
head -1 "$raw" | grep -q cc1plus || { echo "largest trace is not cc1plus: $(head -1 "$raw")" >&2; exit 1; }
{
    echo "# allocation trace of cc1plus: g++ $(g++ -dumpfullversion) -O2 -c bench/traces/gxx-cc1plus.cc"
    echo "# recorded $(date -u +%Y-%m-%d) with bench/tools/record-trace.sh; format: see bench/replay.c"
    awk '/^#/ { next }
         $1 == "m" { n = $2; print "m", $3; next }
         $1 == "a" { n = $2; print "a", $3, $4; next }
         $1 == "f" { print "f", n - $2; next }
         $1 == "r" { print "r", n - $2, $3; next }' "$raw"
} | gzip -9 >"$out"
echo "wrote $out: $(gzip -dc "$out" | grep -vc '^#') calls, $(wc -c <"$out") bytes" >&2
