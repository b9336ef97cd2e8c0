# bench/find-lib.sh — sourced by run.sh and targets.sh.
# find_lib NAME: the path of the 64-bit shared library NAME (as ldconfig
# knows it, else from the usual directories), or nothing.
multiarch=$( (gcc -print-multiarch || cc -print-multiarch) 2>/dev/null)
[ -n "$multiarch" ] || multiarch=$(uname -m)-linux-gnu
find_lib() {
    local p
    p=$(/sbin/ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64|64bit|AArch64/ { print $NF; exit }')
    [ -z "$p" ] && p=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }')
    for d in "/usr/lib/$multiarch" "/lib/$multiarch" /usr/lib /usr/local/lib; do
        [ -n "$p" ] && break
        [ -e "$d/$1" ] && p="$d/$1"
    done
    [ -n "$p" ] && echo "$p"
}
