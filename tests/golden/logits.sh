#!/bin/sh
# logits.sh MODEL TOKENS GOLDEN LIMIT BACKEND [EXTRA] — run `ember logits` on
# a shared model (EXTRA: one more option, e.g. --kv-type=q8_0) and require
# NMSE < LIMIT against the golden file; with NMSE_ROWS="V FRAC" in the
# environment (mixture-of-experts goldens) row by row instead (nmse.c).
# Skips (77) when the shared folder is absent.
set -u
model=$1 tokens=$2 golden=$3 limit=$4 backend=$5 extra=${6:-}
sh=${EMBER_SHARED:-../shared}
if [ ! -f "$sh/$model" ] || [ ! -f "$sh/$golden" ]; then
    echo "SKIP: $sh/$model or its golden file is absent"
    exit 77
fi
out=$(mktemp "${TMPDIR:-/tmp}/ember-logits-XXXXXX")
trap 'rm -f "$out"' EXIT
"$EMBER_BIN" logits --model "$sh/$model" --tokens-file "$sh/$tokens" \
    --output "$out" --backend "$backend" $extra || exit 1
if [ -n "${NMSE_ROWS:-}" ]; then
    "$NMSE_BIN" "$out" "$sh/$golden" "$limit" --rows $NMSE_ROWS
else
    "$NMSE_BIN" "$out" "$sh/$golden" "$limit"
fi
