#!/bin/sh
# Build native/build/libchatapp_gguf.so, the custom-op library of GGUF kernels (docs/converter.md,
# "Native kernels"). Without a C++ compiler or the ONNX Runtime headers it says so in one line and
# exits 0: chatapp then keeps the stock ONNX graph.
here=$(cd "$(dirname "$0")" && pwd)
out=$here/build
lib=$out/libchatapp_gguf.so
headers=${ORT_HEADERS:-$out/ort}
cxx=${CXX:-c++}
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "native kernels: no C++ compiler ($cxx), skipped; the stock ONNX graph is used"
  exit 0
fi
if [ ! -f "$headers/onnxruntime_cxx_api.h" ]; then
  if ! sh "$here/fetch_headers.sh" "$headers" || [ ! -f "$headers/onnxruntime_cxx_api.h" ]; then
    echo "native kernels: ONNX Runtime headers unavailable (set ORT_HEADERS), skipped; the stock ONNX graph is used"
    exit 0
  fi
fi
if [ -f "$lib" ] && [ -z "$(find "$here" -maxdepth 1 -newer "$lib" \( -name '*.cpp' -o -name '*.h' -o -name '*.inc' \))" ]; then
  exit 0
fi
mkdir -p "$out"
# One binary for every x86-64: the AVX2 and AVX-512 kernels carry their own target attributes
# and are chosen at run time, so no -march here.
# Written beside and renamed into place: a running process keeps its mapping of the old file.
"$cxx" -std=c++17 -O3 -shared -fPIC -fvisibility=hidden -Wall -Wextra \
  -I"$headers" "$here/gguf_ops.cpp" -o "$lib.tmp" && mv "$lib.tmp" "$lib"
