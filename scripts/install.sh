#!/bin/sh
# install.sh — install ember on a box as a systemd service (docs/INSTALL.md):
#   $PREFIX/bin/ember                    the binary (default: build/firmware/ember)
#   $UNITDIR/ember.service               firmware/ember.service, ExecStart pointed at it
#   $PREFIX/share/doc/ember/INSTALL.md   the page that says how to run it
#   /var/lib/ember/models/               the state directory's model folder (--model FILE copies one in)
#   /etc/ember/                          the configuration directory
# then the `ember` system user (no home, nologin; in the render and video
# groups where they exist, for /dev/dri) unless it exists, ownership of
# /var/lib/ember, and `systemctl daemon-reload` when systemd runs.
#
# DESTDIR (default empty: this box) puts every file under that folder and
# touches nothing outside it: no user is made unless DESTDIR/etc/passwd
# exists (an image being built: the user goes into its files through
# useradd --prefix), no chown, no daemon-reload.
#
# usage: scripts/install.sh [--bin PATH] [--model FILE.gguf]
#   environment: PREFIX (/usr/local), UNITDIR (/etc/systemd/system), DESTDIR
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
UNITDIR=${UNITDIR:-/etc/systemd/system}
DESTDIR=${DESTDIR:-}
bin="$here/build/firmware/ember"
model=""
while [ $# -gt 0 ]; do
    case "$1" in
    --bin) bin=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$PREFIX" in
/*) ;;
*) echo "install: PREFIX must be an absolute path, not $PREFIX" >&2; exit 2 ;;
esac
if [ ! -x "$bin" ]; then
    echo "install: $bin is not an executable: build first (meson setup build && ninja -C build) or pass --bin" >&2
    exit 2
fi
if [ -n "$model" ] && [ ! -f "$model" ]; then
    echo "install: --model $model: no such file" >&2
    exit 2
fi

state=/var/lib/ember
conf=/etc/ember
install -d -m 0755 "$DESTDIR$PREFIX/bin" "$DESTDIR$UNITDIR" "$DESTDIR$PREFIX/share/doc/ember"
install -m 0755 "$bin" "$DESTDIR$PREFIX/bin/ember"
sed -e "s#^ExecStart=/usr/local/bin/ember #ExecStart=$PREFIX/bin/ember #" \
    -e "s#^Documentation=file:///usr/local/share/doc/ember/#Documentation=file://$PREFIX/share/doc/ember/#" \
    "$here/firmware/ember.service" > "$DESTDIR$UNITDIR/ember.service.tmp"
chmod 0644 "$DESTDIR$UNITDIR/ember.service.tmp"
mv "$DESTDIR$UNITDIR/ember.service.tmp" "$DESTDIR$UNITDIR/ember.service"
install -m 0644 "$here/docs/INSTALL.md" "$DESTDIR$PREFIX/share/doc/ember/INSTALL.md"
install -d -m 0750 "$DESTDIR$state" "$DESTDIR$state/models" "$DESTDIR$conf"
# the configuration: the sample, set for a service (every interface, the
# database in the state directory); an existing one is the operator's: kept
if [ -f "$DESTDIR$conf/ember.conf" ]; then
    echo "install: $DESTDIR$conf/ember.conf exists: kept"
else
    sed -e "s#^host = .*#host = 0.0.0.0#" -e "s#^db = .*#db = $state/ember.db#" \
        "$here/firmware/ember.conf" > "$DESTDIR$conf/ember.conf.tmp"
    chmod 0640 "$DESTDIR$conf/ember.conf.tmp"
    mv "$DESTDIR$conf/ember.conf.tmp" "$DESTDIR$conf/ember.conf"
fi
if [ -n "$model" ]; then
    install -m 0640 "$model" "$DESTDIR$state/models/$(basename "$model")"
fi
echo "install: $DESTDIR$PREFIX/bin/ember, $DESTDIR$UNITDIR/ember.service, $DESTDIR$state/models/"

# the user: on this box, or in an image's own /etc/passwd under DESTDIR
if [ -z "$DESTDIR" ]; then
    exists() { getent "$1" "$2" >/dev/null; }
    prefix=""
elif [ -f "$DESTDIR/etc/passwd" ]; then
    exists() { grep -q "^$2:" "$DESTDIR/etc/$1"; }
    prefix="--prefix $DESTDIR"
else
    echo "install: DESTDIR is set and holds no etc/passwd: no user made, nothing changed outside $DESTDIR"
    exit 0
fi
if exists passwd ember; then
    echo "install: the user ember exists"
else
    # shellcheck disable=SC2086
    useradd $prefix --system --user-group --no-create-home --home-dir "$state" --shell /usr/sbin/nologin \
        --comment "ember LLM inference appliance" ember
    echo "install: made the system user ember"
fi
for g in render video; do   # the DRM nodes under /dev/dri belong to these
    if exists group "$g"; then
        # shellcheck disable=SC2086
        usermod $prefix -a -G "$g" ember
    fi
done
if [ -n "$DESTDIR" ]; then
    exit 0
fi
chown -R ember:ember "$state"
chown root:ember "$conf" "$conf/ember.conf"
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload
    echo "install: systemd reloaded; next: a model in $state/models, an API key" \
         "(runuser -u ember -- $PREFIX/bin/ember keys add admin --db $state/ember.db), systemctl enable --now ember"
else
    echo "install: systemd does not run here: no daemon-reload"
fi
