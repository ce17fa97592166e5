#!/usr/bin/env bash
# Installs dtrain's build and test dependencies from Debian's packages.
# Idempotent: packages already present are skipped, so a second run takes a second.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  nlohmann-json3-dev libcli11-dev libasio-dev catch2
  libdnnl-dev ocl-icd-opencl-dev
  libgloo-dev
  dataset-fashion-mnist fortunes fortunes-min
  zlib1g-dev libssl-dev
  libprotobuf-dev protobuf-compiler libboost-dev
  python3-numpy python3-yaml
  iproute2 openssh-client openssh-server
  clang-14 libclang-rt-14-dev ninja-build
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
