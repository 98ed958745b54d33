#!/bin/sh
# storage_cli.sh — `ember keys` and `ember usage` end to end, against ledgers
# that storage_fixture (argument 1) fills with fixed requests: key creation
# (shown once, never stored or listed), admin keys, list, revoke and their errors; usage
# as table, CSV and JSON, by key, model, day, hour, class and endpoint; two --db ledgers merged; bad input and missing or
# corrupt files (exit 2, message naming the file). Needs EMBER_BIN.
set -u
EMBER=${EMBER_BIN:?EMBER_BIN is not set}
FIXTURE=${1:?usage: storage_cli.sh STORAGE_FIXTURE}
T=$(mktemp -d "${TMPDIR:-/tmp}/ember-cli-storage.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# expect_status WANT CMD...: run CMD (stdout to $T/out, stderr to $T/err).
expect_status() {
    want=$1
    shift
    "$@" >"$T/out" 2>"$T/err"
    got=$?
    [ "$got" -eq "$want" ] || fail "exit $got, wanted $want: $* ($(cat "$T/err"))"
}

# same NAME: compare $T/out with stdin.
same() {
    cat >"$T/want"
    diff -u "$T/want" "$T/out" >"$T/diff" || { fail "$1 differs:"; cat "$T/diff" >&2; }
}

"$FIXTURE" "$T/a.db" a || { echo "FAIL: fixture a" >&2; exit 1; }
"$FIXTURE" "$T/b.db" b || { echo "FAIL: fixture b" >&2; exit 1; }

# ---- keys ----------------------------------------------------------------
K="$T/keys.db"
expect_status 0 "$EMBER" keys add ci-bot --class background --rate-limit 30/min --db "$K"
key=$(cat "$T/out")
case "$key" in
    em_???????????????????????????????????????????) ;;
    *) fail "keys add printed '$key', not one em_ key" ;;
esac
[ "$(wc -l <"$T/out")" -eq 1 ] || fail "keys add printed more than the key on stdout"
grep -q "only time" "$T/err" || fail "keys add does not say the key is shown once"
prefix=$(printf '%s' "$key" | cut -c1-9)
secret=$(printf '%s' "$key" | cut -c4-)
expect_status 0 "$EMBER" keys add second --db "$K"
key2=$(cat "$T/out")
[ "$key" != "$key2" ] || fail "two keys are the same"

expect_status 0 "$EMBER" keys list --db "$K"
grep -q "^ 1  ci-bot  $prefix  background   30/min      no     " "$T/out" || fail "list: ci-bot row: $(cat "$T/out")"
grep -q "^ 2  second  .*interactive  none        no     " "$T/out" || fail "list: second row"
head -1 "$T/out" | grep -q "^id  name .* rate_limit  admin  cache  created  " || fail "list: header: $(head -1 "$T/out")"
grep -q "^ 2  second  .*  no     on     " "$T/out" || fail "list: second's response cache is not on"
if grep -qF "$secret" "$T/out" "$T/err"; then fail "list shows a key"; fi
for f in "$K" "$K-wal"; do
    [ -f "$f" ] || continue
    if grep -qaF "$secret" "$f"; then fail "the key is stored in $f"; fi
done

# An admin key: said so when made, listed as one.
expect_status 0 "$EMBER" keys add root --admin --db "$K"
grep -q "^admin key 3 \"root\"" "$T/err" || fail "keys add --admin said: $(cat "$T/err")"
expect_status 0 "$EMBER" keys list --db "$K"
grep -q "^ 3  root    em_......  interactive  none        yes    " "$T/out" || fail "list: root row: $(cat "$T/out")"
[ "$(grep -c '  yes  ' "$T/out")" -eq 1 ] || fail "list: more than one admin key"
expect_status 2 "$EMBER" keys add other --admin=yes --db "$K"
# The response cache per key: off when made, then on and off again.
expect_status 0 "$EMBER" keys add nocache --no-response-cache --db "$K"
grep -q "no response cache" "$T/err" || fail "keys add --no-response-cache said: $(cat "$T/err")"
expect_status 0 "$EMBER" keys list --db "$K"
grep -q "^ 4  nocache .*  no     off    " "$T/out" || fail "list: nocache row: $(cat "$T/out")"
expect_status 0 "$EMBER" keys set 4 --response-cache on --db "$K"
[ "$(cat "$T/out")" = "key 4: response cache on" ] || fail "keys set said: $(cat "$T/out")"
expect_status 0 "$EMBER" keys list --db "$K"
grep -q "^ 4  nocache .*  no     on     " "$T/out" || fail "list: nocache after set on: $(cat "$T/out")"
expect_status 0 "$EMBER" keys set 4 --response-cache off --db "$K"
# rotate: a new secret printed once, the old one refused, the row the same
[ "$(printf '%s\n' "$key2" | "$FIXTURE" "$K" verify -)" = "ok second" ] || fail "key 2 does not verify before rotate"
expect_status 0 "$EMBER" keys rotate 2 --db "$K"
key2b=$(cat "$T/out")
case "$key2b" in em_???????????????????????????????????????????) ;; *) fail "rotate printed '$key2b'" ;; esac
[ "$key2b" != "$key2" ] || fail "rotate printed the old key"
grep -q "only time" "$T/err" || fail "rotate does not say the key is shown once"
[ "$(printf '%s\n' "$key2" | "$FIXTURE" "$K" verify -)" = "unknown" ] || fail "the old key 2 still verifies"
[ "$(printf '%s\n' "$key2b" | "$FIXTURE" "$K" verify -)" = "ok second" ] || fail "the rotated key 2 does not verify"
key2=$key2b
expect_status 2 "$EMBER" keys rotate 99 --db "$K"
grep -q "no such key" "$T/err" || fail "rotate unknown: $(cat "$T/err")"
expect_status 2 "$EMBER" keys set 4 --response-cache maybe --db "$K"
expect_status 2 "$EMBER" keys set 4 --db "$K"
expect_status 2 "$EMBER" keys set 99 --response-cache on --db "$K"
grep -q "no such key" "$T/err" || fail "keys set unknown: $(cat "$T/err")"

expect_status 0 "$EMBER" keys revoke 1 --db "$K"
[ "$(cat "$T/out")" = "revoked key 1" ] || fail "revoke said: $(cat "$T/out")"
expect_status 0 "$EMBER" keys list --db "$K"
grep "^ 1 " "$T/out" | grep -q 'Z  [0-9-]* [0-9:]*Z$' || fail "list: no revocation time"
grep "^ 2 " "$T/out" | grep -q 'Z  -$' || fail "list: second is not active"
expect_status 1 "$EMBER" keys revoke 1 --db "$K"
grep -q "already revoked" "$T/err" || fail "revoke twice: $(cat "$T/err")"
expect_status 1 "$EMBER" keys rotate 1 --db "$K"
grep -q "revoked" "$T/err" || fail "rotate a revoked key: $(cat "$T/err")"
expect_status 2 "$EMBER" keys revoke 7 --db "$K"
grep -q "no such key" "$T/err" || fail "revoke unknown: $(cat "$T/err")"
expect_status 2 "$EMBER" keys revoke abc --db "$K"
expect_status 2 "$EMBER" keys add x --class urgent --db "$K"
expect_status 2 "$EMBER" keys add x --rate-limit 5/hour --db "$K"
expect_status 2 "$EMBER" keys add --db "$K"
expect_status 2 "$EMBER" keys frobnicate
expect_status 0 "$EMBER" keys --help
expect_status 2 "$EMBER" keys list --db "$T/missing.db"
grep -q "ember: $T/missing.db: " "$T/err" || fail "missing db: $(cat "$T/err")"
[ ! -e "$T/missing.db" ] || fail "keys list created a database"
head -c 8192 /dev/urandom >"$T/corrupt.db"
expect_status 2 "$EMBER" keys list --db "$T/corrupt.db"
grep -q "^ember: $T/corrupt.db: .*not a database" "$T/err" || fail "corrupt db: $(cat "$T/err")"
# The default database is ./ember.db.
mkdir "$T/cwd"
(cd "$T/cwd" && "$EMBER" keys add here >/dev/null 2>&1) || fail "keys add with the default --db"
[ -f "$T/cwd/ember.db" ] || fail "no ./ember.db"

# ---- keys export / import: the same keys on two boxes --------------------
expect_status 0 "$EMBER" keys export --db "$K" --output "$T/keys.json"
[ ! -s "$T/out" ] || fail "export --output printed: $(cat "$T/out")"
[ "$(stat -c %a "$T/keys.json")" = 600 ] || fail "export file mode $(stat -c %a "$T/keys.json")"
if grep -qF "$secret" "$T/keys.json"; then fail "the export holds a key"; fi
grep -q '"format": "ember.keys"' "$T/keys.json" || fail "export: no format"
[ "$(grep -c '"hash": "[0-9a-f]\{64\}"' "$T/keys.json")" -eq 4 ] || fail "export: not 4 hex hashes"
[ "$(grep -c '"response_cache": false' "$T/keys.json")" -eq 1 ] || fail "export: not one key without the response cache"
expect_status 0 "$EMBER" keys export --db "$K"
grep -q '"name": "root"' "$T/out" || fail "export to stdout: $(head -c 300 "$T/out")"
if command -v python3 >/dev/null 2>&1; then
    python3 -m json.tool "$T/keys.json" >/dev/null || fail "the export is not JSON"
fi
K2="$T/keys2.db"
expect_status 0 "$EMBER" keys import "$T/keys.json" --db "$K2"
[ "$(cat "$T/out")" = "imported 4 key(s) into $K2: 4 added, 0 updated, 0 unchanged" ] || fail "import said: $(cat "$T/out")"
"$EMBER" keys list --db "$K" | cut -c1-200 >"$T/list1"
"$EMBER" keys list --db "$K2" | cut -c1-200 >"$T/list2"
diff -u "$T/list1" "$T/list2" >"$T/diff" || { fail "keys list differs after import:"; cat "$T/diff" >&2; }
# Box A's key authenticates on box B; the revoked one stays revoked.
[ "$(printf '%s\n' "$key2" | "$FIXTURE" "$K2" verify -)" = "ok second" ] || fail "key 2 does not verify on B"
[ "$(printf '%s\n' "$key" | "$FIXTURE" "$K2" verify -)" = "revoked" ] || fail "revoked key 1 is not revoked on B"
[ "$(printf 'em_%043d\n' 0 | "$FIXTURE" "$K2" verify -)" = "unknown" ] || fail "an unknown key verifies on B"
expect_status 0 "$EMBER" keys import "$T/keys.json" --db "$K2"
[ "$(cat "$T/out")" = "imported 4 key(s) into $K2: 0 added, 0 updated, 4 unchanged" ] || fail "import twice: $(cat "$T/out")"
expect_status 0 "$EMBER" keys import - --db "$K2" <"$T/keys.json"
grep -q "4 unchanged" "$T/out" || fail "import from stdin: $(cat "$T/out")"
# Revoked on B, active in an older file: stays revoked.
expect_status 0 "$EMBER" keys revoke 2 --db "$K2"
expect_status 0 "$EMBER" keys import "$T/keys.json" --db "$K2"
[ "$(printf '%s\n' "$key2" | "$FIXTURE" "$K2" verify -)" = "revoked" ] || fail "import un-revoked key 2"
# A different key with the same name: refused, nothing imported.
K3="$T/keys3.db"
expect_status 0 "$EMBER" keys add zed --db "$K3"
expect_status 0 "$EMBER" keys add second --db "$K3"
expect_status 2 "$EMBER" keys import "$T/keys.json" --db "$K3"
grep -q "^ember: keys import: $T/keys.json: nothing imported: keys\[1\] \"second\" (em_......): its name second is taken in $K3 by a different key, 2 \"second\"" "$T/err" \
    || fail "clash: $(cat "$T/err")"
[ "$("$EMBER" keys list --db "$K3" | wc -l)" -eq 3 ] || fail "a refused import added keys"
# Hostile files: exit 2, a message naming the file, nothing imported.
K4="$T/keys4.db"
expect_status 0 "$EMBER" keys add only --db "$K4"
printf 'not json' >"$T/bad.json"
expect_status 2 "$EMBER" keys import "$T/bad.json" --db "$K4"
grep -q "^ember: keys import: $T/bad.json: nothing imported: not JSON" "$T/err" || fail "bad JSON: $(cat "$T/err")"
sed 's/"hash": "\([0-9a-f]\{10\}\)[0-9a-f]*"/"hash": "\1"/' "$T/keys.json" >"$T/short.json"
expect_status 2 "$EMBER" keys import "$T/short.json" --db "$K4"
grep -q "keys\[0\].hash: not 64 hexadecimal digits" "$T/err" || fail "short hash: $(cat "$T/err")"
sed 's/"rate_limit_per_min": 30/"rate_limit_per_min": "30"/' "$T/keys.json" >"$T/type.json"
expect_status 2 "$EMBER" keys import "$T/type.json" --db "$K4"
grep -q "keys\[0\].rate_limit_per_min: not an integer" "$T/err" || fail "wrong type: $(cat "$T/err")"
sed 's/"version": 1/"version": 9/' "$T/keys.json" >"$T/v9.json"
expect_status 2 "$EMBER" keys import "$T/v9.json" --db "$K4"
grep -q "version 9: this build reads version 1" "$T/err" || fail "version: $(cat "$T/err")"
head -c $((17 * 1024 * 1024)) /dev/zero | tr '\0' ' ' >"$T/huge.json"
expect_status 2 "$EMBER" keys import "$T/huge.json" --db "$K4"
grep -q "MiB" "$T/err" || fail "huge file: $(cat "$T/err")"
rm -f "$T/huge.json"
expect_status 2 "$EMBER" keys import "$T/none.json" --db "$K4"
grep -q "$T/none.json" "$T/err" || fail "missing file: $(cat "$T/err")"
expect_status 2 "$EMBER" keys import --db "$K4"
[ "$("$EMBER" keys list --db "$K4" | wc -l)" -eq 2 ] || fail "a hostile file imported keys"
expect_status 2 "$EMBER" keys export --db "$T/missing.db"
[ ! -e "$T/missing.db" ] || fail "keys export created a database"
expect_status 2 "$EMBER" keys export --db "$K" --output "$T/no/such/dir/k.json"
expect_status 2 "$EMBER" keys export --db "$K" extra

# ---- usage ---------------------------------------------------------------
expect_status 0 "$EMBER" usage --db "$T/a.db" --since 2024-05-01 --until 2024-05-02 \
    --gpu-cost-per-hour 2 --group-by key
same "table by key" <<'EOF'
group  requests  prompt_tokens  cached_share  completion_tokens  ttft_p50_ms  ttft_p99_ms  tpot_p50_ms  tpot_p99_ms  gpu_hours  cost   cost_per_1m
-             1            400         25.0%                 80         20.0         20.0          6.0          6.0      19.20  38.40    480000.00
alice         2            300         16.7%                 60         10.0         30.0          5.0          7.0      14.40  28.80    480000.00
bob           2            350         42.9%                 60         50.0         50.0          9.0          9.0      14.40  28.80    480000.00
--------------------------------------------------------------------------------------------------------------------------------------------------
total         5           1050         28.6%                200         20.0         50.0          6.0          9.0      48.00  96.00    480000.00
EOF

# Two boxes merged; CSV quoting of a model name with a comma and quotes.
expect_status 0 "$EMBER" usage --db "$T/a.db" --db "$T/b.db" --group-by model --format csv \
    --gpu-cost-per-hour 2 --since 2024-05-01 --until 2024-05-02
grep -q "$(printf '\r')\$" "$T/out" || fail "CSV lines do not end in CRLF"
tr -d '\r' <"$T/out" >"$T/out.lf" && mv "$T/out.lf" "$T/out"
same "csv by model" <<'EOF'
group,requests,prompt_tokens,cached_tokens,cached_share,completion_tokens,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,gpu_hours,cost,cost_per_1m,queue_p50_ms,queue_p99_ms
"llama, ""q8""",3,550,200,0.3636,180,15.0,20.0,4.0,6.0,43.20,86.4000,480000.0000,7.5,10.0
tiny,4,1600,700,0.4375,220,30.0,50.0,7.0,9.0,52.80,105.6000,480000.0000,15.0,25.0
EOF

expect_status 0 "$EMBER" usage --db "$T/a.db" --db "$T/b.db" --group-by day --format json \
    --gpu-cost-per-hour 2 --since 2024-05-01 --until 2024-05-02
same "json by day" <<'EOF'
{
  "group_by": "day",
  "since_ms": 1714521600000,
  "until_ms": 1714694400000,
  "ledgers": 2,
  "gpu_cost_per_hour": 2.0,
  "groups": [
    {
      "group": "2024-05-01",
      "requests": 3,
      "prompt_tokens": 1300,
      "cached_tokens": 550,
      "cached_share": 0.423077,
      "completion_tokens": 160,
      "ttft_p50_ms": 30.0,
      "ttft_p99_ms": 40.0,
      "tpot_p50_ms": 7.0,
      "tpot_p99_ms": 8.0,
      "gpu_hours": 48.0,
      "cost": 96.0,
      "cost_per_1m": 600000.0,
      "queue_p50_ms": 15.0,
      "queue_p99_ms": 20.0
    },
    {
      "group": "2024-05-02",
      "requests": 4,
      "prompt_tokens": 850,
      "cached_tokens": 350,
      "cached_share": 0.411765,
      "completion_tokens": 240,
      "ttft_p50_ms": 20.0,
      "ttft_p99_ms": 50.0,
      "tpot_p50_ms": 6.0,
      "tpot_p99_ms": 9.0,
      "gpu_hours": 48.0,
      "cost": 96.0,
      "cost_per_1m": 400000.0,
      "queue_p50_ms": 10.0,
      "queue_p99_ms": 25.0
    }
  ],
  "total": {
    "group": "total",
    "requests": 7,
    "prompt_tokens": 2150,
    "cached_tokens": 900,
    "cached_share": 0.418605,
    "completion_tokens": 400,
    "ttft_p50_ms": 20.0,
    "ttft_p99_ms": 50.0,
    "tpot_p50_ms": 6.0,
    "tpot_p99_ms": 9.0,
    "gpu_hours": 96.0,
    "cost": 192.0,
    "cost_per_1m": 480000.0,
    "queue_p50_ms": 10.0,
    "queue_p99_ms": 25.0
  }
}
EOF
if command -v python3 >/dev/null 2>&1; then
    python3 -m json.tool "$T/out" >/dev/null || fail "usage --format json is not JSON"
fi

# No window given: each box counts from its first request to its last event.
expect_status 0 "$EMBER" usage --db "$T/a.db" --db "$T/b.db" --group-by class
same "table by class, open window" <<'EOF'
group        requests  prompt_tokens  cached_share  completion_tokens  ttft_p50_ms  ttft_p99_ms  tpot_p50_ms  tpot_p99_ms  gpu_hours
background          2           1300         50.0%                160         40.0         50.0          8.0          9.0      25.20
interactive         5            850         29.4%                240         15.0         30.0          5.0          7.0      37.80
------------------------------------------------------------------------------------------------------------------------------------
total               7           2150         41.9%                400         20.0         50.0          6.0          9.0      63.00
EOF

# By endpoint: the fixture's rows name no front door ("-").
expect_status 0 "$EMBER" usage --db "$T/a.db" --group-by endpoint --format json
{ grep -q '"group_by": "endpoint"' "$T/out" && grep -q '"group": "-"' "$T/out"; } ||
    fail "usage by endpoint: $(cat "$T/out")"

# By UTC hour: each hour with requests its own GPU hour (the window's
# other hours count in the total only).
expect_status 0 "$EMBER" usage --db "$T/a.db" --group-by hour --until 2024-05-01 --gpu-cost-per-hour 2
same "table by hour" <<'EOF'
group              requests  prompt_tokens  cached_share  completion_tokens  ttft_p50_ms  ttft_p99_ms  tpot_p50_ms  tpot_p99_ms  gpu_hours  cost   cost_per_1m
2024-05-01T10:00Z         1            100         50.0%                 20         10.0         10.0          5.0          5.0       1.00   2.00    100000.00
2024-05-01T11:00Z         1            200          0.0%                 40         30.0         30.0          7.0          7.0       1.00   2.00     50000.00
--------------------------------------------------------------------------------------------------------------------------------------------------------------
total                     2            300         16.7%                 60         10.0         30.0          5.0          7.0      14.00  28.00    466666.67
EOF

expect_status 0 "$EMBER" usage --db "$T/b.db" --format csv --until 2024-05-01
tr -d '\r' <"$T/out" >"$T/out.lf" && mv "$T/out.lf" "$T/out"
same "csv total only" <<'EOF'
group,requests,prompt_tokens,cached_tokens,cached_share,completion_tokens,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,gpu_hours,cost,cost_per_1m,queue_p50_ms,queue_p99_ms
total,1,1000,500,0.5000,100,40.0,40.0,8.0,8.0,16.00,,,20.0,20.0
EOF

# Merging never writes: no side files, same bytes.
sum_a=$(cksum <"$T/a.db")
expect_status 0 "$EMBER" usage --db "$T/a.db"
[ "$(cksum <"$T/a.db")" = "$sum_a" ] || fail "usage changed a.db"
[ ! -e "$T/a.db-wal" ] && [ ! -e "$T/a.db-shm" ] || fail "usage left -wal/-shm files"

# Bad input.
expect_status 2 "$EMBER" usage --db "$T/a.db" --since 2024-13-01
grep -q "not a date" "$T/err" || fail "bad --since: $(cat "$T/err")"
expect_status 2 "$EMBER" usage --db "$T/a.db" --since 2024-05-02 --until 2024-05-01
expect_status 2 "$EMBER" usage --db "$T/a.db" --group-by user
expect_status 2 "$EMBER" usage --db "$T/a.db" --format xml
expect_status 2 "$EMBER" usage --db "$T/a.db" --gpu-cost-per-hour -1
expect_status 2 "$EMBER" usage --db "$T/a.db" --db "$T/nope.db"
grep -q "ember: $T/nope.db: " "$T/err" || fail "missing db: $(cat "$T/err")"
expect_status 2 "$EMBER" usage --db "$T/corrupt.db"
grep -q "ember: $T/corrupt.db: " "$T/err" || fail "corrupt db: $(cat "$T/err")"
(cd "$T" && "$EMBER" usage >/dev/null 2>"$T/err")
[ $? -eq 2 ] && grep -q "ember.db" "$T/err" || fail "usage without ./ember.db: $(cat "$T/err")"

if [ "$failures" -ne 0 ]; then
    echo "storage_cli: $failures failure(s)" >&2
    exit 1
fi
echo "storage_cli: ok"
