#!/usr/bin/env python3
"""fusor's x86 kernels beside PyTorch on the CPU: eager, torch.compile (TorchInductor) and
TorchInductor's max-autotune mode, on the cases of `fusor-bench` (fused GEMM, gated SwiGLU,
attention, norm chains, the pointwise DAG), f32, on the same inputs.

Each case's inputs are written once as .npy files. Rounds alternate the two sides: fusor's
side is `fusor run REGION --in ... --repeats N` in a child process (the median of N warm
kernel calls, the kernel call alone, as the oracle-verified lane runs it), PyTorch's is the
median of N calls of each mode in this process (the call as a user makes it, the output's
allocation included). A ratio is PyTorch's time over fusor's within a round; the report gives
the median over rounds and their spread. Accuracy: each output against a float64 eager
evaluation of the same PyTorch expression, as the largest absolute difference.

PyTorch's large outputs (64 MiB at 4096 x 4096) would otherwise be fresh mmap'ed pages on every
call, their page faults three quarters or more of its time; the script runs with glibc's
mmap threshold raised (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) so freed blocks are
reused, the peer's best configuration (--default-malloc keeps glibc's defaults).

PyTorch is not a build or test dependency; install it into a virtual environment:
    python3 -m venv /opt/inductor-venv && /opt/inductor-venv/bin/pip install torch numpy
    /opt/inductor-venv/bin/python bench/inductor/run_inductor.py --json-out results.json
"""
import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the docstring says how to install them
    sys.exit(f"run_inductor.py needs PyTorch and numpy ({e}); see the top of {__file__} for how to install them")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- cases -------------------------------------------------------------------------------
# `inputs()` makes numpy f32 arrays in fusor's operand order; `torch_args` maps them to the
# PyTorch call's natural layouts (a linear layer's weight as [N, K], as nn.Linear keeps it), and
# `weights` names the arguments that are a model's parameters: PyTorch holds them in a module,
# so TorchInductor's freezing can fold and prepack them, as it would in a deployed model.
class Case:
    def __init__(self, name, region, inputs, fn, torch_args, weights, work, unit):
        self.name, self.region, self.inputs, self.fn = name, region, inputs, fn
        self.torch_args, self.weights, self.work, self.unit = torch_args, weights, work, unit


class Bound(torch.nn.Module):
    """fn(*args) with the arguments at `weights` held as parameters; forward takes the rest."""

    def __init__(self, fn, args, weights):
        super().__init__()
        self.fn, self.order = fn, []
        for i, a in enumerate(args):
            if i in weights:
                self.register_parameter(f"w{i}", torch.nn.Parameter(a, requires_grad=False))
                self.order.append(f"w{i}")
            else:
                self.order.append(None)

    def forward(self, *acts):
        it = iter(acts)
        return self.fn(*[getattr(self, o) if o else next(it) for o in self.order])


def rng_arrays(seed, *shapes, scale=1.0):
    g = np.random.default_rng(seed)
    return [(g.standard_normal(s) * scale).astype(np.float32) for s in shapes]


def linear_weight(b):
    # B [K, N] for fusor; nn.Linear's weight is [N, K].
    return torch.from_numpy(np.ascontiguousarray(b.T))


def linear_args(a, b, *rest):
    return [torch.from_numpy(a), linear_weight(b)] + [torch.from_numpy(r) for r in rest]


def plain_args(*arrays):
    return [torch.from_numpy(x) for x in arrays]


def gemm_case(m, n, k, residual):
    shapes = [(m, k), (k, n), (n,)] + ([(m, n)] if residual else [])
    inputs = lambda: rng_arrays(7, *shapes, scale=0.5)
    if residual:
        fn = lambda x, w, b, r: F.linear(x, w, b) + r
        region = "fused { epilogue = [bias]; residual = true }"
        name = f"gemm_bias_residual_{m}x{n}x{k}"
    else:
        fn = lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh")
        region = "fused { epilogue = [bias, gelu] }"
        name = f"gemm_bias_gelu_{m}x{n}x{k}"
    return Case(name, region, inputs, fn, linear_args, {1, 2}, 2.0 * m * n * k, "GFLOP/s")


def gated_case(m, k, h):
    inputs = lambda: rng_arrays(9, (m, k), (k, h), (k, h), scale=0.5)
    fn = lambda x, wg, wu: F.silu(F.linear(x, wg)) * F.linear(x, wu)
    args = lambda a, wg, wu: [torch.from_numpy(a), linear_weight(wg), linear_weight(wu)]
    return Case(f"gated_silu_{m}x{k}x{h}", "gated { gate_act = silu }", inputs, fn, args, {1, 2},
                4.0 * m * h * k, "GFLOP/s")


def attention_case(s, d, causal, b=2, h=4, m=None):
    """S queries against S keys per head, or (decode) m queries against s keys."""
    mq = s if m is None else m
    inputs = lambda: rng_arrays(11, (b, h, mq, d), (b, h, s, d), (b, h, s, d))
    scale = 1.0 / math.sqrt(d)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    region = f"attention {{ scale = {scale!r}; causal = {'true' if causal else 'false'} }}"
    name = (f"attention_{'causal_' if causal else ''}s{s}_d{d}" if m is None else
            f"attention_decode_h{h}_n{s}_d{d}")
    return Case(name, region, inputs, fn, plain_args, set(), 4.0 * b * h * mq * s * d * (0.5 if causal else 1.0),
                "GFLOP/s")


def norm_case(kind, rows, n):
    if kind == "rmsnorm":
        inputs = lambda: rng_arrays(13, (rows, n), (rows, n), (n,))
        fn = lambda x, r, w: F.rms_norm(x + r, (n,), w, eps=1e-5)
        region = "norm_chain { norm = rmsnorm; add_residual = true; weight = true }"
        name, nbytes, weights = f"rmsnorm_residual_weight_{rows}x{n}", 4.0 * (3 * rows * n + n), {2}
    else:
        inputs = lambda: rng_arrays(13, (rows, n), (n,), (n,))
        if kind == "layer_norm":
            fn = lambda x, w, b: F.layer_norm(x, (n,), w, b, eps=1e-5)
        else:
            fn = lambda x, w, b: torch.softmax(x, -1) * w + b
        region = f"norm_chain {{ norm = {kind}; weight = true; bias = true }}"
        name, nbytes, weights = f"{kind}_weight_bias_{rows}x{n}", 4.0 * (2 * rows * n + 2 * n), {1, 2}
    return Case(name, region, inputs, fn, plain_args, weights, nbytes, "GB/s")


def pointwise_case(rows, n):
    inputs = lambda: rng_arrays(15, (rows, n), (rows, n))
    fn = lambda x, g: torch.tanh(x * torch.sigmoid(g)) + x * 0.5
    region = ("pointwise { inputs = [x, g]; s = sigmoid(g); y = mul(x, s); t = tanh(y); h = mul(x, 0.5); "
              "out = add(t, h); output = out }")
    return Case(f"pointwise_swish_gate_{rows}x{n}", region, inputs, fn, plain_args, set(), 4.0 * 3 * rows * n,
                "GB/s")


def all_cases():
    for m, n, k in ((512, 2048, 768), (1024, 1024, 1024), (2048, 2048, 2048), (128, 3072, 768)):
        yield gemm_case(m, n, k, False)
    for m, n, k in ((512, 2048, 768), (1024, 1024, 1024)):
        yield gemm_case(m, n, k, True)
    yield gated_case(512, 768, 2048)
    for causal in (False, True):
        for s in (512, 2048):
            for d in (64, 128):
                yield attention_case(s, d, causal)
    for kind in ("rmsnorm", "layer_norm", "softmax"):
        yield norm_case(kind, 4096, 4096)
    yield pointwise_case(4096, 4096)
    # fusor-bench's `small` suite where a call takes a millisecond or more (shorter ones would
    # time PyTorch's Python dispatch as much as its kernel): a decoder's weight-streaming GEMMs
    # and decode-step attention, one query row per head against a long KV cache.
    for m in (1, 4, 8, 16, 32):
        yield gemm_case(m, 4096, 4096, False)
    for h, n in ((32, 2048), (8, 8192)):
        yield attention_case(n, 128, False, b=1, h=h, m=1)


# ---- the two sides -------------------------------------------------------------------------
def fusor_call(fusor, region_path, npys, lane, repeats, out_path=None):
    """Median kernel milliseconds of `repeats` warm calls, and the lane that ran."""
    cmd = [fusor, "run", region_path, "--repeats", str(repeats), "--in", *npys]
    cmd += ["--target", "x86"] + (["--force", lane] if lane != "auto" else [])
    if out_path:
        cmd += ["--out", out_path]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    m = re.match(r"lane=(\S+) time_ms=([0-9.eE+-]+)", p.stdout)
    if not m:
        raise RuntimeError(f"unexpected output of fusor run: {p.stdout!r}")
    return float(m.group(2)), m.group(1)


def torch_times(fn, args, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def quartiles(xs):
    s = sorted(xs)
    return s[len(s) // 4], s[(3 * len(s)) // 4]


def compiled(fn, mode):
    # Each mode compiles from an empty cache, so max-autotune cannot pick up the default mode's
    # graph; a mode compiled before recompiles at its next call, the accuracy check's, untimed.
    torch._dynamo.reset()
    return torch.compile(fn, mode=None if mode == "inductor" else "max-autotune", dynamic=False)


def default_lane():
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    return "x86_avx512" if " avx512f" in flags else "x86_avx2"


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def run_case(case, args, workdir):
    region_path = os.path.join(workdir, case.name + ".region")
    with open(region_path, "w") as f:
        f.write(case.region + "\n")
    inputs = case.inputs()
    npys = []
    for i, a in enumerate(inputs):
        npys.append(os.path.join(workdir, f"{case.name}_{i}.npy"))
        np.save(npys[-1], a)
    all_args = case.torch_args(*inputs)
    module = Bound(case.fn, all_args, case.weights).eval()
    targs = [a for i, a in enumerate(all_args) if i not in case.weights]
    modes = ["eager", "inductor"] + ([] if args.no_max_autotune else ["inductor_max_autotune"])
    fns, compile_s = {"eager": module}, {}
    with torch.no_grad():
        for mode in modes[1:]:
            t0 = time.time()
            fns[mode] = compiled(module, "inductor" if mode == "inductor" else "max-autotune")
            for _ in range(2):
                fns[mode](*targs)
            compile_s[mode] = round(time.time() - t0, 1)
        # Accuracy: each side against the float64 evaluation of the PyTorch expression.
        ref = case.fn(*[t.double() for t in all_args])
        outs = {mode: fns[mode](*targs) for mode in modes}
    out_npy = os.path.join(workdir, case.name + "_out.npy")
    est_ms, lane = fusor_call(args.fusor, region_path, npys, args.lane, 1, out_npy)
    fusor_out = torch.from_numpy(np.load(out_npy)).double().reshape(ref.shape)
    err = {"fusor": float((fusor_out - ref).abs().max())}
    for mode in modes:
        err[mode] = float((outs[mode].double() - ref).abs().max())

    # Calls per round: about args.round_ms of fusor's kernel time, at least 5.
    repeats = max(5, min(200, int(args.round_ms / max(est_ms, 1e-3))))
    per_round = {k: [] for k in ["fusor"] + modes}
    ratios = {mode: [] for mode in modes}
    with torch.no_grad():
        for r in range(args.rounds):
            f_ms, lane = fusor_call(args.fusor, region_path, npys, args.lane, repeats)
            per_round["fusor"].append(f_ms)
            for mode in modes:
                fns[mode](*targs)  # one warm call after the child's run
                t = statistics.median(torch_times(fns[mode], targs, repeats))
                per_round[mode].append(t)
                ratios[mode].append(t / f_ms)
    row = {"case": case.name, "lane": lane, "rounds": args.rounds, "calls_per_round": repeats,
           "fusor_ms": statistics.median(per_round["fusor"]), "max_abs_err": err["fusor"]}
    rate = case.work / (row["fusor_ms"] * 1e-3) / 1e9
    row["gflops" if case.unit == "GFLOP/s" else "gbps"] = rate
    for mode in modes:
        row[f"{mode}_ms"] = statistics.median(per_round[mode])
        row[f"{mode}_ratio"] = statistics.median(ratios[mode])
        q1, q3 = quartiles(ratios[mode])
        row[f"{mode}_ratio_q1"], row[f"{mode}_ratio_q3"] = q1, q3
        row[f"{mode}_max_abs_err"] = err[mode]
    for mode, s in compile_s.items():
        row[f"{mode}_compile_s"] = s
    return row


def print_row(row, modes):
    unit = "GFLOP/s" if "gflops" in row else "GB/s"
    rate = row.get("gflops", row.get("gbps"))
    parts = [f"{row['case']:<36} fusor {row['fusor_ms']:9.3f} ms {rate:7.1f} {unit} ({row['lane']}, err {row['max_abs_err']:.1e})"]
    for mode in modes:
        parts.append(f"{mode} {row[mode + '_ms']:9.3f} ms x{row[mode + '_ratio']:.2f} "
                     f"[{row[mode + '_ratio_q1']:.2f}-{row[mode + '_ratio_q3']:.2f}] err {row[mode + '_max_abs_err']:.1e}")
    print("\n    ".join(parts), flush=True)


MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 32), "MALLOC_TRIM_THRESHOLD_": str(1 << 32)}


def main():
    if "--default-malloc" not in sys.argv and any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        # glibc reads these once, at start: run again with them set.
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **MALLOC_ENV})
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    built = [os.path.join(ROOT, "build", b, "fusor") for b in ("release", "perf")]
    ap.add_argument("--fusor", default=next((b for b in built if os.access(b, os.X_OK)), built[0]),
                    help="the fusor binary (default: build/release/fusor, else build/perf/fusor)")
    ap.add_argument("--filter", default="", help="only cases whose name contains this text")
    ap.add_argument("--lane", default=default_lane(),
                    help="fusor's lane (default: x86_avx512 where the CPU has AVX-512, else x86_avx2; "
                         "auto: the arbiter's choice among the x86 lanes)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per case (default 5)")
    ap.add_argument("--round-ms", type=float, default=300.0,
                    help="about how many milliseconds of fusor kernel time a round holds (default 300)")
    ap.add_argument("--no-max-autotune", action="store_true", help="skip TorchInductor's max-autotune mode")
    ap.add_argument("--default-malloc", action="store_true",
                    help="keep glibc's allocation defaults (each large PyTorch output then page-faults anew)")
    ap.add_argument("--json-out", help="write the machine description and every case's row here")
    args = ap.parse_args()
    if not os.access(args.fusor, os.X_OK):
        sys.exit(f"no fusor binary at {args.fusor} (build it, or pass --fusor)")
    threads = os.cpu_count() or 1
    torch.set_num_threads(threads)
    import torch._inductor.config as inductor_config
    inductor_config.freezing = True  # inference: weights folded and prepacked, as the CPU docs advise

    modes = ["eager", "inductor"] + ([] if args.no_max_autotune else ["inductor_max_autotune"])
    machine = {"cpu_model": cpu_model(), "threads": threads, "torch": torch.__version__,
               "date": datetime.date.today().isoformat(), "lane": args.lane,
               "torch_config": [l.strip(" -") for l in torch.__config__.show().splitlines()
                                if re.search(r"Math Kernel|MKL-DNN|OpenMP|CPU capability", l)],
               "malloc": "glibc defaults" if args.default_malloc else MALLOC_ENV,
               "timing": "rounds alternate fusor (a child process: fusor run --repeats N, the median of N warm "
                         "kernel calls) and each PyTorch mode (the median of N calls in this process, the "
                         "output's allocation included); ratios are PyTorch's time over fusor's within a "
                         "round, their median over rounds, with quartiles; errors against a float64 eager "
                         "evaluation of the same expression"}
    print(json.dumps(machine), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as workdir:
        for case in all_cases():
            if args.filter not in case.name:
                continue
            row = run_case(case, args, workdir)
            rows.append(row)
            print_row(row, modes)
            for f in os.listdir(workdir):
                os.unlink(os.path.join(workdir, f))
            if args.json_out:  # after every case, so a run cut short keeps the cases it finished
                with open(args.json_out, "w") as f:
                    json.dump({"machine": machine, "cases": rows}, f, indent=1)
                    f.write("\n")


if __name__ == "__main__":
    main()
