#!/usr/bin/env python3
"""Writes examples/transformer_block.onnx: the default model of `fusor run`.

A pre-norm transformer block on x[2, 32, 64] (batch 2, 32 tokens, width 64, 4 heads):
  h  = LayerNorm(x)                      q, k, v = h @ Wq + bq, ...
  attention: softmax(q k^T * 1/sqrt(16)) v per head, then @ Wo + bo, + x (residual)
  h2 = LayerNorm(r1);  y = r1 + (Gelu(h2 @ W1 + b1) @ W2 + b2)
Weights are seeded N(0, 1) * 0.1, so the file is reproducible. Needs `pip install onnx numpy`.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

B, S, D, H, F = 2, 32, 64, 4, 256
HD = D // H


def main(out_path):
    rng = np.random.default_rng(7)
    inits = []

    def weight(name, shape, scale=0.1):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    nodes = []

    def node(op, ins, outs, **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=outs[0] + "_node", **attrs))
        return outs[0]

    def gamma(name):  # a norm scale near 1
        inits.append(numpy_helper.from_array((1 + rng.standard_normal(D) * 0.05).astype(np.float32), name))
        return name

    h = node("LayerNormalization", ["x", gamma("ln1_gamma"), weight("ln1_beta", [D], 0.05)], ["h"], axis=-1, epsilon=1e-5)

    heads_shape = const("heads_shape", [B, S, H, HD])
    model_shape = const("model_shape", [B, S, D])
    proj = {}
    for n in "qkv":
        mm = node("MatMul", ["h", weight("W" + n, [D, D])], [n + "_mm"])
        biased = node("Add", [mm, weight("b" + n, [D], 0.02)], [n + "_proj"])
        split = node("Reshape", [biased, heads_shape], [n + "_heads"])
        proj[n] = node("Transpose", [split], [n + "4"], perm=[0, 2, 1, 3])
    kt = node("Transpose", [proj["k"]], ["k_t"], perm=[0, 1, 3, 2])
    scores = node("MatMul", [proj["q"], kt], ["scores"])
    scale = const("attn_scale", 1.0 / np.sqrt(HD), np.float32)
    scaled = node("Mul", [scores, scale], ["scores_scaled"])
    probs = node("Softmax", [scaled], ["probs"], axis=-1)
    ctx = node("MatMul", [probs, proj["v"]], ["ctx4"])
    ctx = node("Transpose", [ctx], ["ctx_t"], perm=[0, 2, 1, 3])
    ctx = node("Reshape", [ctx, model_shape], ["ctx"])
    o = node("MatMul", [ctx, weight("Wo", [D, D])], ["o_mm"])
    o = node("Add", [o, weight("bo", [D], 0.02)], ["o_proj"])
    r1 = node("Add", ["x", o], ["resid1"])

    h2 = node("LayerNormalization", [r1, gamma("ln2_gamma"), weight("ln2_beta", [D], 0.05)], ["h2"], axis=-1, epsilon=1e-5)
    m = node("MatMul", [h2, weight("W1", [D, F])], ["mlp_up"])
    m = node("Add", [m, weight("b1", [F], 0.02)], ["mlp_up_b"])
    m = node("Gelu", [m], ["mlp_act"])
    m = node("MatMul", [m, weight("W2", [F, D], 0.05)], ["mlp_down"])
    m = node("Add", [m, weight("b2", [D], 0.02)], ["mlp_down_b"])
    node("Add", [r1, m], ["y"])

    graph = helper.make_graph(
        nodes,
        "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, S, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, S, D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], producer_name="fusor")
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, out_path)
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "examples", "transformer_block.onnx"))
