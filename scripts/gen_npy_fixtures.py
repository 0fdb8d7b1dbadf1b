#!/usr/bin/env python3
"""Regenerates tests/data/npy/*.npy with NumPy (needs `pip install numpy`).

The files are committed so tests/test_npy.cpp never needs NumPy at run time; the test
asserts the values listed here, which are exact in every dtype used.
"""
import os
import sys

import numpy as np

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "npy")
os.makedirs(out, exist_ok=True)

m23 = [[1.5, -2.0, 0.25], [3.0, -0.125, 1024.0]]


def save(name, arr, version=None):
    path = os.path.join(out, name)
    if version is None:
        np.save(path, arr)
    else:
        with open(path, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)


save("f4_2x3.npy", np.array(m23, dtype="<f4"))
save("f2_2x3.npy", np.array(m23, dtype="<f2"))
save("f8_2x3.npy", np.array(m23, dtype="<f8"))
save("i8_5.npy", np.array([-3, 0, 7, 1 << 40, -(1 << 20)], dtype="<i8"))
save("f4_scalar.npy", np.array(-6.5, dtype="<f4"))
save("f4_0x3.npy", np.zeros((0, 3), dtype="<f4"))
save("f4_2x1x3x2.npy", np.arange(12, dtype="<f4").reshape(2, 1, 3, 2) - 5.5)
save("f4_2x3_v2.npy", np.array(m23, dtype="<f4"), version=(2, 0))
save("f4_2x3_v3.npy", np.array(m23, dtype="<f4"), version=(3, 0))
# Unsupported on purpose:
save("bad_fortran.npy", np.asfortranarray(np.array(m23, dtype="<f4")))
save("bad_bigendian.npy", np.array(m23, dtype=">f4"))
save("bad_i4.npy", np.array([1, 2, 3], dtype="<i4"))
save("bad_bool.npy", np.array([True, False]))
save("bad_structured.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i8")]))
print("wrote fixtures to", os.path.normpath(out), "with numpy", np.__version__, file=sys.stderr)
