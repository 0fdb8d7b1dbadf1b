#!/bin/bash
export PATH=$PATH:/opt/torch/.venv/bin
L=/tmp/lentlogs; mkdir -p $L
date; nproc; lscpu | grep -E "Model name|^CPU\(s\)"
t0=$(date +%s)
cmake -S . -B build/lt -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSOR_ENABLE_CUDA=OFF -DCMAKE_PREFIX_PATH=$PWD/.deps/usr > $L/cmake.log 2>&1
ninja -C build/lt > $L/build.log 2>&1 || { tail -50 $L/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
OMP_NUM_THREADS=2 ctest --test-dir build/lt -j8 -R "X86|Cli|Arbiter" > $L/ctest.log 2>&1; echo "ctest rc=$?"
grep -E "tests passed|Failed|Not Run" $L/ctest.log | head -20
echo "tests $(( $(date +%s) - t0 )) s"
export OMP_NUM_THREADS=2 OMP_PROC_BIND=close OPENBLAS_CORETYPE=SkylakeX
for i in 1 2; do taskset -c 2,3 ./build/lt/fusor bench all --min-ms 1000 --save $OUT/run$i.json > $L/run$i.txt 2>&1; echo "run$i rc=$? $(( $(date +%s) - t0 )) s"; done
export ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell
for s in gemm gated attention; do taskset -c 2,3 ./build/lt/fusor bench $s --lane x86_avx2 --min-ms 1000 --save $OUT/avx2-$s.json > $L/avx2-$s.txt 2>&1; echo "avx2 $s rc=$? $(( $(date +%s) - t0 )) s"; done
tar czf $OUT/logs.tar.gz -C $L .
