#!/bin/sh
# install_test.sh — scripts/install.sh into a DESTDIR (never this box): the
# binary, the unit (ExecStart pointed at PREFIX's binary), the doc page, the
# state and configuration directories and a model copied in land where they
# should; with an image's etc/passwd under DESTDIR the `ember` system user is
# made there (nologin, home /var/lib/ember, a system uid, in the render
# group), once, however often it runs; bad arguments exit 2. Needs EMBER_BIN.
set -u
EMBER=${EMBER_BIN:?EMBER_BIN is not set}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
INSTALL="$SRC/scripts/install.sh"
T=$(mktemp -d "${TMPDIR:-/tmp}/ember-install.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT INT TERM
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

host_user_before=$(getent passwd ember || true)
host_unit_before=$(ls -l /etc/systemd/system/ember.service 2>/dev/null || true)
printf 'GGUF fake model\n' > "$T/tiny.gguf"

# ---- a plain DESTDIR: files only -------------------------------------------------------
D="$T/root"
DESTDIR="$D" "$INSTALL" --bin "$EMBER" --model "$T/tiny.gguf" > "$T/out" 2>&1 || fail "install exited $?: $(cat "$T/out")"
[ -x "$D/usr/local/bin/ember" ] || fail "no executable $D/usr/local/bin/ember"
cmp -s "$EMBER" "$D/usr/local/bin/ember" || fail "the installed binary differs from $EMBER"
U="$D/etc/systemd/system/ember.service"
[ -f "$U" ] || fail "no unit at $U"
grep -q '^ExecStart=/usr/local/bin/ember serve --config /etc/ember/ember.conf$' "$U" || fail "ExecStart: $(grep ExecStart= "$U")"
grep -q '^Type=notify$' "$U" || fail "the unit is not Type=notify"
[ "$(stat -c %a "$U")" = 644 ] || fail "the unit's mode is $(stat -c %a "$U")"
[ -f "$D/usr/local/share/doc/ember/INSTALL.md" ] || fail "no INSTALL.md under share/doc/ember"
[ -d "$D/etc/ember" ] || fail "no configuration directory"
[ "$(stat -c %a "$D/var/lib/ember")" = 750 ] || fail "state directory mode $(stat -c %a "$D/var/lib/ember")"
cmp -s "$T/tiny.gguf" "$D/var/lib/ember/models/tiny.gguf" || fail "the model was not copied into models/"
grep -q 'no user made' "$T/out" || fail "no word about the user: $(cat "$T/out")"
[ ! -e "$D/etc/passwd" ] || fail "a passwd file appeared under DESTDIR"
C="$D/etc/ember/ember.conf"
grep -qx 'host = 0.0.0.0' "$C" || fail "the installed config does not listen on every interface: $(grep '^host' "$C")"
grep -qx 'db = /var/lib/ember/ember.db' "$C" || fail "the installed config's database: $(grep '^db' "$C")"
[ "$(stat -c %a "$C")" = 640 ] || fail "the config's mode is $(stat -c %a "$C")"
# the installed config is one ember reads: --print-config takes it, with its values from the file
"$EMBER" serve --config "$C" --print-config > "$T/pc" 2>&1 || fail "--print-config of the installed config: $(cat "$T/pc")"
grep -q "0.0.0.0.*$C:" "$T/pc" || fail "host not from the installed file: $(grep -i host "$T/pc")"
# an operator's config is kept on a second install
echo '# mine' >> "$C"
DESTDIR="$D" "$INSTALL" --bin "$EMBER" > "$T/out2" 2>&1 || fail "second install exited $?"
tail -n 1 "$C" | grep -qx '# mine' || fail "a second install replaced the operator's config"
grep -q 'ember.conf exists: kept' "$T/out2" || fail "no word about the kept config: $(cat "$T/out2")"
n=$(find "$D" -type f | wc -l)
[ "$n" -eq 5 ] || fail "$n files installed, wanted 5: $(find "$D" -type f)"

# ---- another PREFIX: the unit follows it -----------------------------------------------
PREFIX=/opt/ember DESTDIR="$T/opt" "$INSTALL" --bin "$EMBER" > "$T/out" 2>&1 || fail "PREFIX=/opt/ember exited $?"
grep -q '^ExecStart=/opt/ember/bin/ember serve ' "$T/opt/etc/systemd/system/ember.service" ||
    fail "PREFIX=/opt/ember: $(grep ExecStart= "$T/opt/etc/systemd/system/ember.service")"
[ -x "$T/opt/opt/ember/bin/ember" ] || fail "PREFIX=/opt/ember: no binary"
grep -q '^Documentation=file:///opt/ember/share/doc/ember/INSTALL.md' "$T/opt/etc/systemd/system/ember.service" ||
    fail "PREFIX=/opt/ember: $(grep Documentation= "$T/opt/etc/systemd/system/ember.service")"

# ---- an image with its own /etc/passwd: the user is made there, once -------------------
I="$T/image"
mkdir -p "$I/etc"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$I/etc/passwd"
printf 'root:x:0:\nvideo:x:44:\nrender:x:105:\n' > "$I/etc/group"
printf 'root:*:19000:0:99999:7:::\n' > "$I/etc/shadow"
printf 'root:*::\nvideo:*::\nrender:!::\n' > "$I/etc/gshadow"
for i in 1 2; do
    DESTDIR="$I" "$INSTALL" --bin "$EMBER" > "$T/out$i" 2>&1 || fail "image install $i exited $?: $(cat "$T/out$i")"
done
grep -q 'made the system user ember' "$T/out1" || fail "first run: $(cat "$T/out1")"
grep -q 'the user ember exists' "$T/out2" || fail "second run: $(cat "$T/out2")"
[ "$(grep -c '^ember:' "$I/etc/passwd")" -eq 1 ] || fail "passwd: $(cat "$I/etc/passwd")"
line=$(grep '^ember:' "$I/etc/passwd")
uid=$(echo "$line" | cut -d: -f3)
[ "$uid" -lt 1000 ] || fail "ember's uid $uid is not a system one"
[ "$(echo "$line" | cut -d: -f6,7)" = /var/lib/ember:/usr/sbin/nologin ] || fail "passwd line: $line"
[ ! -e "$I/var/lib/ember/ember" ] || fail "a home directory was made"
grep -q '^render:x:105:ember$' "$I/etc/group" || fail "ember is not in render: $(cat "$I/etc/group")"
grep -q '^video:x:44:ember$' "$I/etc/group" || fail "ember is not in video: $(cat "$I/etc/group")"
grep -q '^ember:' "$I/etc/group" || fail "no ember group"

# ---- bad arguments ---------------------------------------------------------------------
DESTDIR="$T/bad" "$INSTALL" --bin "$T/nope" > "$T/out" 2>&1
[ $? -eq 2 ] || fail "a missing --bin did not exit 2"
grep -q 'is not an executable' "$T/out" || fail "missing --bin: $(cat "$T/out")"
PREFIX=relative DESTDIR="$T/bad" "$INSTALL" --bin "$EMBER" > "$T/out" 2>&1
[ $? -eq 2 ] || fail "a relative PREFIX did not exit 2"
DESTDIR="$T/bad" "$INSTALL" --bin "$EMBER" --model "$T/nope.gguf" > "$T/out" 2>&1
[ $? -eq 2 ] || fail "a missing --model did not exit 2"
[ ! -e "$T/bad" ] || fail "a refused install left files"

# ---- nothing happened on this box ------------------------------------------------------
[ "$(getent passwd ember || true)" = "$host_user_before" ] || fail "this box's user database changed"
[ "$(ls -l /etc/systemd/system/ember.service 2>/dev/null || true)" = "$host_unit_before" ] ||
    fail "this box's /etc/systemd/system/ember.service changed"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)" >&2
    exit 1
fi
echo "install: DESTDIR, PREFIX, an image's user database, bad arguments: ok"
