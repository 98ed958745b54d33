#!/bin/sh
# setup.sh — install the Debian 12 packages ember needs to build and test,
# skipping those already present, then fetch the default chat model into
# models/ (scripts/fetch-model.sh) and the Python packages the tests drive
# ember with into .venv (scripts/venv.sh). Run as root (or with sudo).
set -eu

PKGS="meson ninja-build gcc pkg-config python3 python3-pip python3-venv python3-websockets curl
libvulkan-dev mesa-vulkan-drivers vulkan-tools vulkan-validationlayers
glslc glslang-tools spirv-tools
libsqlite3-dev sqlite3 libwebsockets-dev libjansson-dev libinih-dev
libsodium-dev libxxhash-dev libpcre2-dev libsystemd-dev libssl-dev openssl
libjs-markdown-it node-dompurify libjs-highlight.js libjs-chart.js libjs-katex fonts-katex
chromium chromium-driver python3-selenium python3-jsonschema haproxy
clang libclang-rt-14-dev e2fsprogs"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "setup: all packages present"
else
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        SUDO="sudo"
    fi
    echo "setup: installing$missing"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
    # shellcheck disable=SC2086
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

"$(dirname "$0")/fetch-model.sh"
"$(dirname "$0")/venv.sh"
