#!/bin/sh
# Builds the static relay that runs inside an engine's VM (see sandboxd-relay.c) into
# dist/relay/sandboxd-relay-linux-<arch>, for this machine's architecture and, when a cross
# compiler is installed, for the other one. Without a C compiler nothing is built: sandboxd then
# skips non-root Docker Desktop sessions with that reason.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/../../../dist/relay"
mkdir -p "$out"
build() {
  "$1" -static -Os -s -Wall -Wextra -Werror -o "$out/sandboxd-relay-linux-$2" "$here/sandboxd-relay.c"
}
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) native=amd64; other=arm64; cross=aarch64-linux-gnu-gcc ;;
  Linux-aarch64) native=arm64; other=amd64; cross=x86_64-linux-gnu-gcc ;;
  *) native=''; other=''; cross='' ;;
esac
if [ -n "$native" ] && command -v cc >/dev/null 2>&1; then build cc "$native"; else echo "sandboxd: no Linux C compiler; the Docker Desktop relay is not built" >&2; fi
if [ -n "$cross" ] && command -v "$cross" >/dev/null 2>&1; then build "$cross" "$other"; fi
