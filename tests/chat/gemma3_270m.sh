#!/bin/sh
# gemma3_270m.sh MODEL — the real Gemma 3 270M (fetched by set-up; SKIP
# without it) against llama.cpp's run of it
# (../shared/golden/logits/gemma3-270m-Q4_K_M.t13.*): the prompt's ids from
# ember's tokenizer (262,144-token SPM vocabulary, BOS first); the logits of
# those 13 tokens on the CPU reference and on Vulkan, each within NMSE 3e-3
# (measured 1.8e-3 on both, every row's top token the reference's: the
# reference quantizes activations inside its Q5_0, Q8_0 and K-quant dot
# products); and on Vulkan the greedy continuation of 24 tokens id for id
# ("Berlin. The capital of the United States is Washington, D.C. ...";
# the CPU reference's generation loop is the one Vulkan's runs, and 24
# tokens of it take 12 s here).
set -u
model=$1
sh=${EMBER_SHARED:-../shared}
gold=$sh/golden/logits/gemma3-270m-Q4_K_M.t13
if [ ! -f "$model" ]; then
    echo "SKIP: $model is absent (scripts/fetch-model.sh gemma3-270m fetches it)"
    exit 77
fi
if [ ! -f "$gold.f32" ]; then
    echo "SKIP: $gold.f32 is absent"
    exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-gemma3-XXXXXX")
trap 'rm -rf "$dir"' EXIT
prompt="The capital of France is Paris. The capital of Germany is"
status=0
ids=$("$EMBER_BIN" tokenize --model "$model" --text "$prompt") || exit 1
want=$(tr -s ' \n' ' ' <"$sh/golden/logits/tokens-gemma3-270m.txt" | sed 's/ *$//')
if [ "$(echo $ids)" != "$want" ]; then
    echo "FAIL: tokenized prompt: $ids; the reference: $want"
    status=1
fi
for backend in cpu vulkan; do
    "$EMBER_BIN" logits --model "$model" --tokens-file "$sh/golden/logits/tokens-gemma3-270m.txt" \
        --output "$dir/logits.f32" --backend $backend || exit 1
    printf '%s: ' $backend
    "$NMSE_BIN" "$dir/logits.f32" "$gold.f32" 3e-3 || status=1
done
"$EMBER_BIN" run --model "$model" --prompt "$prompt" -n 24 --temp 0 --backend vulkan \
    --ids-out "$dir/ids" >"$dir/out" || exit 1
if ! cmp -s "$dir/ids" "$gold.txt"; then
    echo "FAIL: greedy ids differ from the reference's"
    diff "$dir/ids" "$gold.txt"
    status=1
fi
[ $status = 0 ] && echo "ok: $(tr '\n' ' ' <"$dir/out" | head -c 120)"
exit $status
