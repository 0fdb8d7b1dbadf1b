#!/usr/bin/env bash
# Builds fusor with the CUDA target and runs the GPU test suite in one go, on a machine with
# an NVIDIA GPU (the lent H200). With --bench (or --bench-quick) it then runs the benchmark
# against PyTorch. Logs and JSON land in $OUT (default bench/results/).
#   scripts/gpu-check.sh [--bench|--bench-quick] [--no-tests]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build/gpu}
OUT=${OUT:-$ROOT/bench/results}
BENCH=""
TESTS=1
for a in "$@"; do
  case $a in
  --bench) BENCH=full ;;
  --bench-quick) BENCH=quick ;;
  --no-tests) TESTS=0 ;;
  *) echo "unknown argument $a" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
# The device image keeps cmake and ninja in the torch venv.
[ -d /opt/torch/.venv/bin ] && export PATH=$PATH:/opt/torch/.venv/bin
LOG=$OUT/gpu-check.log
{
  echo "# fusor gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1
  echo "# git $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) (working tree, uncommitted changes included)"
} | tee "$LOG"

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSOR_BUILD_TESTS=ON >"$OUT/gpu-build.log" 2>&1 &&
  cmake --build "$BUILD" --target test_cuda_emit test_cuda_lane fusor-cuda-bench fusor >>"$OUT/gpu-build.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
  tail -60 "$OUT/gpu-build.log"
  echo "BUILD FAILED" | tee -a "$LOG"
  exit $rc
fi
echo "# build ok ($(grep -c . "$OUT/gpu-build.log") log lines)" | tee -a "$LOG"

status=0
if [ $TESTS -eq 1 ]; then
  for t in test_cuda_emit test_cuda_lane; do
    timeout 400 "$BUILD/$t" --gtest_color=no 2>&1 | tee -a "$LOG"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  done
fi
# The CLI works like its x86 counterpart.
if true; then
  # Operands for `fusor run` on the fused example (64x96 @ 96x128, bias, residual).
  NPY=$BUILD/npy && mkdir -p "$NPY" && python3 -c "import numpy as np; r = np.random.default_rng(0)
for n, s in (('A', (64, 96)), ('B', (96, 128)), ('bias', (128,)), ('res', (64, 128))):
    np.save('$NPY/' + n + '.npy', (r.standard_normal(s) * 0.3).astype(np.float32))"
  for cmd in "run examples/fused_bias_gelu_residual.region --target cuda --in $NPY/A.npy $NPY/B.npy $NPY/bias.npy $NPY/res.npy" \
    "verify examples/attention_causal.region --target cuda" \
    "emit examples/gated_silu.region --target cuda"; do
    echo "\$ fusor $cmd" | tee -a "$LOG"
    (cd "$ROOT" && timeout 120 "$BUILD/fusor" $cmd 2>&1 | head -14) | tee -a "$LOG"
  done
  # The arbiter across the cuda candidates (generic, tensor-core, cuBLASLt): oracle, then
  # measured autotune, for a large and a short GEMM; and a whole graph on --target auto.
  echo 'fused { epilogue = [bias, gelu]; storage = bf16; }' >"$BUILD/gemm_bf16.region"
  for dims in 4096,4096,4096 512,4096,4096; do
    echo "\$ fusor explain gemm_bf16.region --target cuda --dims $dims" | tee -a "$LOG"
    FUSOR_CORPUS=$BUILD/corpus.json timeout 300 "$BUILD/fusor" explain "$BUILD/gemm_bf16.region" --target cuda \
      --dims $dims 2>&1 | tail -12 | tee -a "$LOG"
  done
  echo "\$ fusor run examples/mlp_block.graph --target auto" | tee -a "$LOG"
  (cd "$ROOT" && FUSOR_CORPUS=$BUILD/corpus.json timeout 300 "$BUILD/fusor" run examples/mlp_block.graph \
    --target auto 2>&1 | tail -25) | tee -a "$LOG"
fi
if [ -n "$BENCH" ]; then
  extra="${BENCH_ARGS:-}" # e.g. BENCH_ARGS="--only attention"
  [ "$BENCH" = quick ] && extra=--quick
  FUSOR_CACHE_DIR=$BUILD/bench-cache PYTHONUNBUFFERED=1 timeout 470 python3 "$ROOT/bench/gpu/run_bench.py" \
    --fusor-bench "$BUILD/fusor-cuda-bench" --out "$OUT/gpu-bench.jsonl" $extra 2>&1 | tee "$OUT/gpu-bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
echo "# gpu-check exit $status" | tee -a "$LOG"
exit $status
