#!/bin/sh
# chat_ttft.sh [BUILD_DIR] [MODEL] — what reusing the KV cache of earlier
# turns saves in `ember chat` (docs/PERFORMANCE.md): a first turn with a long
# user message (a text of about 400 tokens to summarise), then a short
# second turn, greedy; then the second turn again in a fresh `ember chat`
# that --loads the first turn, so that nothing is cached. Prints the second
# turn's prompt size, cached tokens and time to first token both ways, three
# times. A benchmark, not a test: it asserts nothing.
set -eu
build=${1:-build}
model=${2:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
ember="$build/firmware/ember"
dir=$(mktemp -d "${TMPDIR:-/tmp}/ember-chat-ttft-XXXXXX")
trap 'rm -rf "$dir"' EXIT
story=$(tr '\n' ' ' <"$(dirname "$0")/../data/story.txt" | cut -c1-1800)
first="Summarise this story in one sentence: $story"
second="Who is the main character?"
stat() {   # the stats line of the last turn: prompt, cached, first token ms
    grep 'ember: prompt' "$1" | tail -n 1 | sed -E 's/ember: prompt ([0-9]+) tokens, ([0-9]+) cached .*first token ([0-9]+) ms.*/\1 \2 \3/'
}
for run in 1 2 3; do
    printf '%s\n/save %s\n%s\n' "$first" "$dir/first.json" "$second" |
        "$ember" chat --model "$model" --temp 0 -n 32 >/dev/null 2>"$dir/warm.err"
    printf '%s\n' "$second" |
        "$ember" chat --model "$model" --temp 0 -n 32 --load "$dir/first.json" >/dev/null 2>"$dir/cold.err"
    set -- $(stat "$dir/warm.err") $(stat "$dir/cold.err")
    echo "run $run: second turn $1 tokens: $2 cached, first token after $3 ms; nothing cached: $6 ms"
done
