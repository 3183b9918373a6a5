#!/usr/bin/env bash
# Installs every Debian package that building and testing wsync needs. Idempotent: packages that are
# already installed are skipped, so a second run does nothing and needs no network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libcli11-dev libcpp-httplib-dev libboost-dev nlohmann-json3-dev zlib1g-dev
  # Prometheus metrics; the tests parse a scrape with the Python client, a parser not ours.
  prometheus-cpp-dev python3-prometheus-client
  libgtest-dev libgmock-dev
  # SGLang's map-once colocated route speaks checkpoint-engine's ZMQ protocol; its host simulator
  # is the engine side, with pyzmq.
  libzmq3-dev cppzmq-dev
  python3 python3-numpy python3-zmq
  curl procps openssl util-linux
  # The reliability suite (docs/RELIABILITY.md): clang and its runtimes for the ASan/UBSan build
  # and libFuzzer, llvm-symbolizer for the sanitizers' stacks.
  clang-14 libclang-rt-14-dev llvm-14
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
