#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages fusor builds with, and only the missing ones:
# `apt-get update` runs only if something is missing, sudo only when not root.
# Prints one line per package. FUSOR_SKIP_DEPS=1 skips the whole step (e.g. on machines
# without a package registry, where the tree is configured by hand).
set -euo pipefail

packages=(
  cmake ninja-build g++ make               # build
  clang clang-format libclang-rt-14-dev    # fuzzers (libFuzzer), `make format`
  libgtest-dev                             # tests
  nlohmann-json3-dev libcli11-dev libfmt-dev libssl-dev
  libdnnl-dev libopenblas-dev              # CPU peers / vendor tier
  ocl-icd-opencl-dev                       # dnnl-config.cmake requires OpenCL (a Recommends)
  libonnx-dev libprotobuf-dev protobuf-compiler
  python3
)

if [[ "${FUSOR_SKIP_DEPS:-0}" == 1 ]]; then
  echo "install-deps: FUSOR_SKIP_DEPS=1, not checking packages"
  exit 0
fi
if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps: no dpkg on this system; install these by hand: ${packages[*]}" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]]; then
    printf '%-22s present\n' "$p"
  else
    printf '%-22s installing\n' "$p"
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

sudo=()
if [[ "$(id -u)" -ne 0 ]]; then sudo=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
