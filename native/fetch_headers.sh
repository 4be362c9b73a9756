#!/bin/sh
# Fetch ONNX Runtime's C/C++ API headers (Debian trixie's libonnxruntime-dev 1.21.0) into $1,
# unpacked from the .deb without installing anything or touching the machine's apt sources.
# The C API is versioned: a library built against API 21 loads in later onnxruntime wheels.
set -e
dest=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial"
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
echo "deb $uri trixie main" > "$tmp/sources.list"
o="-o Dir::Etc::SourceList=$tmp/sources.list -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=$tmp/lists -o Dir::Cache=$tmp/cache -o Debug::NoLocking=1"
apt-get -qq $o update >/dev/null 2>&1
(cd "$tmp" && apt-get -qq $o download libonnxruntime-dev >/dev/null 2>&1)
dpkg-deb -x "$tmp"/libonnxruntime-dev_*.deb "$tmp/x"
mkdir -p "$dest"
cp "$tmp"/x/usr/include/onnxruntime/*.h "$dest"/
