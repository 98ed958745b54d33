#!/bin/sh
# run.sh [BUILD_DIR] — the single-user benchmark table of docs/PERFORMANCE.md:
# generates the 155M-parameter random llama (dim 1024, 8 layers, 16 heads,
# 4 KV heads, FFN 2816, 32000 vocabulary) in Q4_0, Q8_0 and Q4_K_M into
# BUILD_DIR/bench-models (never committed), then runs `ember bench --json` on
# them and on the shared models, and prints one markdown row per model.
# With EMBER_BENCH_BIG=1 also a 2.4B-parameter llama (dim 2560, 32 layers,
# 20 heads, 4 KV heads, FFN 6912, 32000 vocabulary; 1.3 GB in Q4_0, 2.5 GB
# in Q8_0), whose larger products show the kernels without the fixed cost
# per dispatch that dominates the 155M model's small ones.
set -eu
build=${1:-build}
ember="$build/firmware/ember"
gen="$build/tests/bench/genmodel"
shared=${EMBER_SHARED:-../shared}
models="$build/bench-models"
mkdir -p "$models"
for t in Q4_0 Q8_0 Q4_K_M; do
    f="$models/bench155M-$t.gguf"
    [ -f "$f" ] || "$gen" "$f" "$t" --dim 1024 --layers 8 --heads 16 --kv-heads 4 --ffn 2816 --vocab 32000
done
big=""
if [ "${EMBER_BENCH_BIG:-0}" = 1 ]; then
    for t in Q4_0 Q8_0; do
        f="$models/bench2.4B-$t.gguf"
        [ -f "$f" ] || "$gen" "$f" "$t" --dim 2560 --layers 32 --heads 20 --kv-heads 4 --ffn 6912 --vocab 32000
        big="$big $f"
    done
fi
printf '| model | weights MB | prefill tok/s | prefill GFLOP/s | prefill eff. | decode tok/s | decode GB/s | decode eff. | read GB/s | FMA GFLOP/s | dispatches/step |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for f in "$models"/bench155M-Q4_0.gguf "$models"/bench155M-Q8_0.gguf "$models"/bench155M-Q4_K_M.gguf \
         "$shared/models/stories260K.gguf" "$shared/models/TinyStories-656K-F32.gguf" \
         "$shared/models/TinyStories-656K-Q8_0.gguf" $big; do
    [ -f "$f" ] || continue
    "$ember" bench --model "$f" --prompt-tokens 512 --gen-tokens 128 --json > "$models/last.json"
    python3 - "$f" "$models/last.json" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[2]))
print("| %s | %.1f | %.0f | %.2f | %.2f | %.0f | %.2f | %.2f | %.2f | %.0f | %d |" % (
    os.path.basename(sys.argv[1]), j["weight_bytes"] / 1e6, j["prefill_tokens_per_s"],
    j["prefill_gflops"], j["prefill_efficiency"], j["decode_tokens_per_s"], j["decode_gbps"],
    j["decode_efficiency"], j["read_bandwidth_gbps"], j["fma_peak_gflops"],
    j["dispatches_per_decode_step"]))
PY
done
