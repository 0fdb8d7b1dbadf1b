#!/usr/bin/env bash
# The x86 lanes on the lent GPU machine's host CPU (16 cores, AMX): builds the CPU side there
# (no CUDA, no ONNX) against Debian's oneDNN carried as .debs in .deps/debs (that machine has
# none and reaches no registry), then runs what the arguments name. Results land in $OUT.
#   scripts/lent-cpu.sh tests            the x86 lane suites (AMX's runs only there)
#   scripts/lent-cpu.sh bench ARGS...    fusor-bench ARGS (add --save $OUT/NAME.json)
#   scripts/lent-cpu.sh inductor ARGS... bench/inductor/run_inductor.py ARGS with the fusor built here,
#                                        run by the python3 that has PyTorch there
# Fetch the .debs here first:  mkdir -p .deps/debs && (cd .deps/debs && apt-get download libdnnl-dev
#   libdnnl2 ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/build/lent-out}
BUILD=$ROOT/build/lent
DN=$ROOT/.deps/root/usr
mkdir -p "$OUT" "$ROOT/.deps/root"
[ -d /opt/torch/.venv/bin ] && export PATH=$PATH:/opt/torch/.venv/bin
if [ ! -e "$DN/lib/x86_64-linux-gnu/libdnnl.so" ]; then
  for f in "$ROOT"/.deps/debs/*.deb; do dpkg -x "$f" "$ROOT/.deps/root"; done
fi
# (Debian's libdnnl needs libOpenCL.so.1 at run time and its CMake config needs OpenCL's.)
export LD_LIBRARY_PATH=$DN/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
{ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSOR_ENABLE_CUDA=OFF -DFUSOR_ONNX=OFF \
    -DCMAKE_PREFIX_PATH="$DN" -DFUSOR_DNNL_INCLUDE="$DN/include" \
    -DFUSOR_DNNL_LIBRARY="$DN/lib/x86_64-linux-gnu/libdnnl.so" &&
  ninja -C "$BUILD" fusor fusor-bench test_x86_amx test_x86_simd test_x86_avx2 test_x86_lane test_x86_sweep; } >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
grep -q "FUSOR_BENCH_ONEDNN" "$BUILD/build.ninja" || echo "# warning: fusor-bench built without oneDNN" >&2
echo "# built in $(($(date +%s) - t0)) s"
case ${1:-} in
tests)
  # The suites side by side (each compiles its kernels one after another). Run az, 16 threads:
  # test_x86_amx took 180 s this way, and test_x86_simd and test_x86_avx2 had not finished at
  # 190 s, so give them the better part of a call.
  suites=(test_x86_amx test_x86_simd test_x86_avx2 test_x86_lane)
  for t in "${suites[@]}"; do
    timeout "${TEST_TIMEOUT:-400}" "$BUILD/$t" --gtest_brief=1 --gtest_color=no >"$OUT/$t.log" 2>&1 &
  done
  status=0
  for t in "${suites[@]}"; do wait -n || status=1; done
  for t in "${suites[@]}"; do echo "$t: $(grep -E '^\[  (PASSED|FAILED)|tests ran' "$OUT/$t.log" | tr '\n' ' ')"; done
  exit $status
  ;;
bench)
  shift
  "$BUILD/fusor-bench" "$@"
  ;;
inductor)
  shift
  py=python3
  [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
  PYTHONUNBUFFERED=1 "$py" "$ROOT/bench/inductor/run_inductor.py" --fusor "$BUILD/fusor" "$@"
  ;;
build) ;;
*) echo "usage: scripts/lent-cpu.sh build | tests | bench ARGS... | inductor ARGS..." >&2; exit 2 ;;
esac
