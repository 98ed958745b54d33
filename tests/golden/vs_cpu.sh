#!/bin/sh
# vs_cpu.sh MODEL CTX N LIMIT [PROMPT] — Vulkan against the CPU reference on
# a model without golden files (a real one fetched by set-up, or a shared
# one under a device limit set in the environment): `ember run` greedy from
# PROMPT for N tokens in a context of CTX must print the same ids and text
# on both backends, and `ember logits` over the prompt and those tokens must
# agree within NMSE LIMIT. MODEL: absolute, or under the shared folder.
# Skips (77) when the model is absent.
set -u
model=$1 ctx=$2 n=$3 limit=$4 prompt=${5:-Once upon a time}
case $model in /*) ;; *) model=${EMBER_SHARED:-../shared}/$model ;; esac
if [ ! -f "$model" ]; then
    echo "SKIP: $model is absent (scripts/fetch-model.sh fetches the real models)"
    exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-vscpu-XXXXXX")
trap 'rm -rf "$dir"' EXIT
if [ -n "${EMBER_QUANTIZE:-}" ]; then
    "$EMBER_BIN" quantize "$model" "$dir/model.gguf" "$EMBER_QUANTIZE" >/dev/null || exit 1
    model=$dir/model.gguf
fi
for b in cpu vulkan; do
    "$EMBER_BIN" run --model "$model" --prompt "$prompt" --ctx "$ctx" -n "$n" --temp 0 \
        --backend $b --ids-out "$dir/$b.ids" >"$dir/$b.out" || exit 1
done
status=0
if ! cmp -s "$dir/cpu.ids" "$dir/vulkan.ids"; then
    echo "FAIL: greedy ids differ between the CPU reference and Vulkan"
    diff "$dir/cpu.ids" "$dir/vulkan.ids"
    status=1
fi
if ! cmp -s "$dir/cpu.out" "$dir/vulkan.out"; then
    echo "FAIL: printed text differs between the CPU reference and Vulkan"
    diff "$dir/cpu.out" "$dir/vulkan.out" | head -5
    status=1
fi
# the prompt and the reference's continuation, as one token sequence
sed -n 's/^\(tokens\|greedy\): //p' "$dir/cpu.ids" | tr '\n' ' ' >"$dir/tokens"
ngen=$(sed -n 's/^greedy: //p' "$dir/cpu.ids" | wc -w)
[ "$ngen" -gt 0 ] || { echo "FAIL: no tokens generated"; exit 1; }
for b in cpu vulkan; do
    "$EMBER_BIN" logits --model "$model" --tokens-file "$dir/tokens" --output "$dir/$b.f32" \
        --backend $b || exit 1
done
"$NMSE_BIN" "$dir/vulkan.f32" "$dir/cpu.f32" "$limit" || status=1
[ $status = 0 ] && echo "ok: $ngen greedy tokens equal; $(head -c 60 "$dir/cpu.out" | tr '\n' ' ')"
exit $status
