#!/usr/bin/env bash
# Installs every Debian 12 package kvpool's build, tests, demo and benchmarks need.
# Idempotent: when everything is present it prints nothing and touches no network.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libxxhash-dev libspdlog-dev libfmt-dev libcli11-dev libsystemd-dev systemd
  libnats-dev nats-server redis-server libhiredis-dev
  clang-14 libclang-rt-14-dev
  procps util-linux
  libmicrohttpd-dev prometheus prometheus-cpp-dev curl tmux libnuma-dev
  python3-dev pybind11-dev python3-numpy python3-pytest
  zlib1g-dev python3-torch python3-matplotlib
  rustc cargo libdlpack-dev python3-setuptools python3-wheel python3-pip
  liburing-dev fio
  libzmq3-dev libmsgpack-cxx-dev python3-zmq python3-msgpack python3-xxhash
  libucx-dev ucx-utils libssl-dev iperf3 iproute2
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "bootstrap: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done"
