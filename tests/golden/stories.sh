#!/bin/sh
# stories.sh MODEL BACKEND — greedy `ember run` of 200 tokens from "Once upon
# a time" must reproduce ../shared/golden/stories/MODEL.once.ids token for
# token and print "Once upon a time" + MODEL.once.txt exactly.
set -u
model=$1 backend=$2
sh=${EMBER_SHARED:-../shared}
gold="$sh/golden/stories/$model"
if [ ! -f "$sh/models/$model.gguf" ] || [ ! -f "$gold.once.ids" ]; then
    echo "SKIP: $sh/models/$model.gguf or its golden story is absent"
    exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-story-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$EMBER_BIN" run --model "$sh/models/$model.gguf" --prompt "Once upon a time" --temp 0 -n 200 \
    --special --backend "$backend" --ids-out "$dir/ids" >"$dir/out" || exit 1
status=0
if ! cmp -s "$dir/ids" "$gold.once.ids"; then
    echo "FAIL: generated ids differ from $gold.once.ids"
    diff "$dir/ids" "$gold.once.ids" | head -5
    status=1
fi
{ printf 'Once upon a time'; cat "$gold.once.txt"; echo; } >"$dir/expected"
if ! cmp -s "$dir/out" "$dir/expected"; then
    echo "FAIL: printed text differs from the golden story"
    diff "$dir/out" "$dir/expected" | head -5
    status=1
fi
[ $status = 0 ] && echo "ok: $(wc -w <"$gold.once.ids") ids and the text match"
exit $status
