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
  # A gRPC client that is not ours, for the health and reflection tests.
  python3-grpcio
  # sd_notify for the systemd unit (Type=notify, watchdog); systemd-analyze checks the unit.
  libsystemd-dev systemd
  # pip installs the Python client offline (no PyPI) with Debian's setuptools and wheel.
  python3-venv python3-pip python3-setuptools python3-wheel
  # The Python client's wheel carries the libraries it loads (client/python/build_wheel.py).
  patchelf binutils
  # The package stage installs the .deb into a clean Debian root.
  mmdebstrap dpkg-dev
  libgtest-dev libgmock-dev
  # SGLang's map-once colocated route speaks checkpoint-engine's ZMQ protocol; its host simulator
  # is the engine side, with pyzmq.
  libzmq3-dev cppzmq-dev
  python3 python3-numpy python3-zmq
  curl procps openssl util-linux
  # watch_test runs wsyncctl watch and the progress bars in a real terminal.
  tmux
  # The reliability suite (docs/RELIABILITY.md): clang and its runtimes for the ASan/UBSan build
  # and libFuzzer, llvm-symbolizer for the sanitizers' stacks.
  clang-14 libclang-rt-14-dev llvm-14
  # The format stage checks every C++ file against .clang-format.
  clang-format
)

# Node and npm: Debian's, unless a node is already installed (npm's registry is the one other
# source the build may use).
command -v npm >/dev/null || packages+=(nodejs npm)

# The manifest check's npm packages (tests/k8s/package-lock.json), into tests/k8s/node_modules.
npm_deps() {
  local dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/tests/k8s"
  if [[ -d "$dir/node_modules/kubernetes-models" ]]; then
    echo "install-deps: npm packages present"
    return
  fi
  echo "install-deps: npm ci in tests/k8s"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  npm_deps
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
npm_deps
