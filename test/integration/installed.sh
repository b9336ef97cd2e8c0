#!/usr/bin/env bash
# installed.sh — `make install` into a scratch prefix, then build programs
# the way a user would, with `pkg-config --cflags --libs profmalloc`, and
# check that profmalloc really serves them: each program writes a heap
# profile at exit (PROFMALLOC_DUMP, with PROFMALLOC_DUMP_EMPTY=1: they sample
# nothing at the default rate), which only profmalloc can do.
#
# The programs reference no profmalloc symbol and call free() only through
# libc (they allocate with strdup/asprintf/getline, as C++ code allocates
# only through operator new): with the linker's --as-needed (Debian's gcc
# default) a plain -lprofmalloc was dropped from such a program, and the
# static archive was never pulled in, both without a word.
#
# Usage: installed.sh   (from the source tree, after make)
# Exits non-zero on the first failure; skips (exit 0) without pkg-config.
set -eu
cd "$(dirname "$0")/../.."
command -v pkg-config >/dev/null || { echo "SKIP installed (no pkg-config)"; exit 0; }
CC=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pm_installed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
make -s install PREFIX="$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"

cat >"$tmp/app.c" <<'EOC'
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
/* allocates only inside libc, never names malloc or free itself */
int main(void)
{
    char *s = NULL;
    for (int i = 0; i < 1000; i++)
        if (asprintf(&s, "line %d of %s", i, strdup("something kept")) < 0) return 1;
    puts(s);
    return 0;
}
EOC

check() { # name, program -> the program's exit dump must exist, no message
    local name=$1 prog=$2
    rm -f "$tmp/heap.pb.gz"
    PROFMALLOC_DUMP_EMPTY=1 PROFMALLOC_DUMP="$tmp/heap.pb.gz" "$prog" >/dev/null 2>"$tmp/err"
    if [ ! -s "$tmp/heap.pb.gz" ] || [ -s "$tmp/err" ]; then
        echo "FAIL installed: $name: no exit dump, profmalloc did not serve the program: $(cat "$tmp/err")" >&2
        exit 1
    fi
    echo "PASS installed: $name"
}

# shellcheck disable=SC2046 # pkg-config's words are meant to split
"$CC" -O2 "$tmp/app.c" -o "$tmp/app_shared" -Wl,--as-needed $(pkg-config --cflags --libs profmalloc) \
    -Wl,-rpath,"$tmp/prefix/lib"
check "pkg-config, shared, --as-needed" "$tmp/app_shared"

# the order CMake's pkg_check_modules(... IMPORTED_TARGET) links in: the
# options first, then the objects, then the library
# shellcheck disable=SC2046
"$CC" -O2 -Wl,--as-needed $(pkg-config --libs-only-other profmalloc) "$tmp/app.c" -o "$tmp/app_cmake" \
    $(pkg-config --cflags --libs-only-L --libs-only-l profmalloc) -Wl,-rpath,"$tmp/prefix/lib"
check "pkg-config, options ahead of the objects (CMake)" "$tmp/app_cmake"

# shellcheck disable=SC2046
"$CC" -O2 -static "$tmp/app.c" -o "$tmp/app_static" $(pkg-config --static --cflags --libs profmalloc)
check "pkg-config --static, cc -static" "$tmp/app_static"
[ -s "$tmp/prefix/share/man/man3/profmalloc.3" ] || { echo "FAIL installed: no man page" >&2; exit 1; }

# Linked into a shared library instead (program -> libapp.so -> profmalloc):
# the C library's malloc binds first and profmalloc never runs; it says so.
cat >"$tmp/lib.c" <<'EOC'
#include <stdlib.h>
void *lib_alloc(size_t n) { return malloc(n); }
EOC
cat >"$tmp/uselib.c" <<'EOC'
#include <stdlib.h>
void *lib_alloc(size_t n);
int main(void) { free(lib_alloc(100)); return 0; }
EOC
# shellcheck disable=SC2046
"$CC" -shared -fPIC "$tmp/lib.c" -o "$tmp/libapp.so" $(pkg-config --libs profmalloc) -Wl,-rpath,"$tmp/prefix/lib"
"$CC" "$tmp/uselib.c" -o "$tmp/uselib" -L"$tmp" -lapp -Wl,-rpath,"$tmp"
"$tmp/uselib" 2>"$tmp/err"
if ! grep -q "^profmalloc: loaded after another malloc" "$tmp/err"; then
    echo "FAIL installed: profmalloc loaded behind the C library's malloc said nothing" >&2
    exit 1
fi
echo "PASS installed: a warning when loaded behind another malloc"

# A preloaded wrapper in front that forwards to profmalloc (a counter using
# dlsym(RTLD_NEXT), libc_malloc_debug) is no other allocator: no warning.
cat >"$tmp/wrap.c" <<'EOC'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
static void *(*next_malloc)(size_t);
void *malloc(size_t n)
{
    if (!next_malloc) next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    return next_malloc(n);
}
EOC
"$CC" -shared -fPIC "$tmp/wrap.c" -o "$tmp/libwrap.so" -ldl
"$CC" "$tmp/uselib.c" "$tmp/lib.c" -o "$tmp/plain"
LD_PRELOAD="$tmp/libwrap.so $tmp/prefix/lib/libprofmalloc.so" PROFMALLOC_DUMP_EMPTY=1 PROFMALLOC_DUMP="$tmp/w.pb.gz" \
    "$tmp/plain" 2>"$tmp/err"
if [ -s "$tmp/err" ] || [ ! -s "$tmp/w.pb.gz" ]; then
    echo "FAIL installed: behind a forwarding wrapper: $(cat "$tmp/err")" >&2
    exit 1
fi
echo "PASS installed: no warning behind a wrapper that forwards to it"
