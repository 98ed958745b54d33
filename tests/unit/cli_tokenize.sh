#!/bin/sh
# cli_tokenize.sh — `ember tokenize`: the ids of golden cases (one line,
# space-separated, newline at the end; with and without BOS, --text and
# --file, --parse-special), and for bad input one "ember: " line on stderr
# with exit status 2. Needs $EMBER_BIN; skips (77) without $EMBER_SHARED.
set -u

bin=${EMBER_BIN:?EMBER_BIN is not set}
vocabs=${EMBER_SHARED:-/nonexistent}/golden/tokenizer
if [ ! -f "$vocabs/ggml-vocab-llama-spm.gguf" ]; then
    echo "cli_tokenize: no $vocabs: skipped"
    exit 77
fi
spm=$vocabs/ggml-vocab-llama-spm.gguf
gpt2=$vocabs/ggml-vocab-gpt-2.gguf

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# expect_ids LABEL EXPECTED ARGS...: stdout must be exactly EXPECTED + "\n", stderr empty
expect_ids() {
    label=$1
    want=$2
    shift 2
    "$bin" tokenize "$@" >"$tmp/out" 2>"$tmp/err"
    st=$?
    printf '%s\n' "$want" >"$tmp/want"
    [ "$st" -eq 0 ] || fail "$label: exit status $st: $(cat "$tmp/err")"
    cmp -s "$tmp/out" "$tmp/want" || fail "$label: printed [$(cat "$tmp/out")], expected [$want]"
    [ ! -s "$tmp/err" ] || fail "$label: wrote to stderr: $(cat "$tmp/err")"
}

# expect_bad LABEL ARGS...: exit status 2, exactly one "ember: " line on stderr, nothing on stdout
expect_bad() {
    label=$1
    shift
    "$bin" tokenize "$@" >"$tmp/out" 2>"$tmp/err"
    st=$?
    [ "$st" -eq 2 ] || fail "$label: exit status $st, expected 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$label: stderr is not one line: $(cat "$tmp/err")"
    grep -q '^ember: ' "$tmp/err" || fail "$label: stderr does not start with 'ember: ': $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "$label: wrote to stdout: $(cat "$tmp/out")"
}

# golden case " Hello World!" of ggml-vocab-llama-spm.gguf.out (+ BOS unless --no-bos)
expect_ids "spm --no-bos" "29871 15043 2787 29991" --model "$spm" --text " Hello World!" --no-bos
expect_ids "spm with BOS" "1 29871 15043 2787 29991" --model "$spm" --text " Hello World!"
expect_ids "spm special as text" "529 29879 29958 10994" --model "$spm" --text "<s>Hello" --no-bos
expect_ids "spm --parse-special" "1 15043" --model "$spm" --text "<s>Hello" --no-bos --parse-special
# golden case "Hello world" of gpt-2 (which adds no BOS), from a file without a newline
printf 'Hello world' >"$tmp/text"
expect_ids "gpt-2 --file" "15496 995" --model "$gpt2" --file "$tmp/text"
printf '\n\n' >"$tmp/nl"
expect_ids "gpt-2 newlines" "628" --model "$gpt2" --file "$tmp/nl"
expect_ids "gpt-2 empty text" "" --model "$gpt2" --text ""

printf 'not a gguf file at all\n' >"$tmp/bad.gguf"
expect_bad "missing model" --model "$tmp/missing.gguf" --text "a"
expect_bad "model is a directory" --model "$tmp" --text "a"
expect_bad "model not GGUF" --model "$tmp/bad.gguf" --text "a"
expect_bad "no --model" --text "a"
expect_bad "neither --text nor --file" --model "$spm"
expect_bad "both --text and --file" --model "$spm" --text "a" --file "$tmp/text"
expect_bad "missing --file" --model "$spm" --file "$tmp/missing.txt"
expect_bad "unknown flag" --model "$spm" --text "a" --bogus
expect_bad "flag without value" --model "$spm" --text

if [ "$fails" -ne 0 ]; then
    echo "cli_tokenize: $fails failures"
    exit 1
fi
echo "cli_tokenize: all passed"
exit 0
