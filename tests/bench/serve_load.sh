#!/bin/sh
# serve_load.sh [BUILD_DIR] [MODEL] [USERS] — what the server costs
# (docs/PERFORMANCE.md): `ember loadtest` against a real `ember serve` on
# 127.0.0.1, then `ember bench --users` in-process on the same model with the
# same request mix (prompts of 32-96 words, the in-process ones as many
# tokens as the server counted on average, +-50%; 16-48 generated; 4
# requests per user; temperature 0; every request generating its
# max_tokens; 512-token steps, as ember serve takes), in the same run; prints one row per user count with both TTFT p50 and tokens/s and
# the server's share. A benchmark, not a test: it asserts nothing.
set -eu
build=${1:-build}
model=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
users=${3:-1,4,16,64}
ember="$build/firmware/ember"
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-serve-load-XXXXXX")
# as many sequences at once as bench --users runs (the most users, plus one)
par=$(echo "$users" | tr ',' '\n' | sort -n | tail -n 1)
"$ember" serve --model "$model" --port 0 --db "$dir/ember.db" --parallel $((par + 1)) \
    >"$dir/serve.out" 2>"$dir/serve.err" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
i=0
while ! grep -q 'listening on' "$dir/serve.out" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 6000 ] || ! kill -0 $pid 2>/dev/null; then
        cat "$dir/serve.err" >&2
        exit 1
    fi
    sleep 0.1
done
url=$(sed -n 's/.*\(http:[^ ]*\)\/.*/\1/p' "$dir/serve.out" | head -n 1)
"$ember" loadtest --url "$url" --users "$users" --requests-per-user 4 --prompt-tokens 32-96 \
    --gen-tokens 16-48 --json >"$dir/loadtest.json"
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
# the in-process prompts as long as the served ones turned out (loadtest
# sends words; the server counts tokens), with the same +-50% spread
ptok=$(python3 -c "import json,sys; l=json.load(open(sys.argv[1]))['levels']; print(round(sum(x['prompt_tokens_mean'] for x in l)/len(l)))" "$dir/loadtest.json")
"$ember" bench --model "$model" --users "$users" --requests-per-user 4 --prompt-tokens "$ptok" --gen-tokens 32 --step-tokens 512 \
    --prefix-tokens 0 --json >"$dir/bench.json"
python3 - "$dir/loadtest.json" "$dir/bench.json" <<'PY'
import json, sys
lt, b = (json.load(open(p)) for p in sys.argv[1:])
print('| users | served TTFT p50 ms | in-process TTFT p50 ms | TTFT added | served tok/s | in-process tok/s | throughput cost |')
print('|---|---|---|---|---|---|---|')
for s, i in zip(lt['levels'], b['levels']):
    assert s['users'] == i['users']
    print('| %d | %.0f | %.0f | %+.1f%% | %.1f | %.1f | %+.1f%% |' % (
        s['users'], s['ttft_p50_ms'], i['ttft_p50_ms'], 100 * (s['ttft_p50_ms'] / i['ttft_p50_ms'] - 1),
        s['tokens_per_s'], i['tokens_per_s'], 100 * (1 - s['tokens_per_s'] / i['tokens_per_s'])))
print('loadtest prompt tokens (mean, by level): %s' % ', '.join('%.0f' % l['prompt_tokens_mean'] for l in lt['levels']))
PY
