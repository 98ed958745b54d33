#!/bin/sh
# layering.sh BUILD_DIR EXE... — the layering that core/'s sub-libraries
# keep, checked on what the build made:
#  - each EXE (the text-only unit tests: tokenizer, templates, grammar)
#    needs no libvulkan (readelf: its NEEDED entries);
#  - no object of web/ or storage/ was compiled with <vulkan/vulkan.h>
#    (ninja's deps log lists every header each one read).
set -eu
build=$1
shift
fail=0
for exe in "$@"; do
    needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    [ -n "$needed" ] || { echo "FAIL: $exe: no NEEDED entries read"; fail=1; continue; }
    case "$needed" in
    *vulkan*) echo "FAIL: $exe links Vulkan: $needed"; fail=1 ;;
    *) echo "ok: ${exe##*/} needs $needed" ;;
    esac
done
# ninja keeps each object's headers (gcc's depfiles) in its deps log
deps=$(ninja -C "$build" -t deps 2>/dev/null) || { echo "FAIL: ninja -t deps"; exit 1; }
n=$(printf '%s\n' "$deps" | grep -c -E '^(web|storage)/[^ ]*\.o: ' || true)
bad=$(printf '%s\n' "$deps" | awk '/^[^ ].*\.o: /{obj = $1} /vulkan\/vulkan\.h/ && obj ~ /^(web|storage)\// {print obj}' |
      sort -u)
if [ -n "$bad" ]; then
    echo "FAIL: these include vulkan/vulkan.h: $bad"
    fail=1
fi
[ "$n" -gt 10 ] || { echo "FAIL: only $n objects of web/ and storage/ in the deps log"; fail=1; }
echo "ok: $n objects of web/ and storage/ read no Vulkan header"
exit $fail
