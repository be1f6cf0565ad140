"""Compare two .npz dumps key by key: exact equality, else max abs diff."""

import sys

import numpy as np

a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
skip = set(sys.argv[3:])
ka, kb = set(a.files), set(b.files)
if ka - kb:
    print("only in", sys.argv[1], sorted(ka - kb))
if kb - ka:
    print("only in", sys.argv[2], sorted(kb - ka))
same = diff = 0
for k in sorted(ka & kb):
    x, y = a[k], b[k]
    if x.shape != y.shape or x.dtype != y.dtype:
        print(
            f"{k}: shape/dtype {x.shape} {x.dtype} vs {y.shape} {y.dtype}"
            + ("" if x.dtype.kind in "USO" else "")
        )
        if x.dtype.kind in "US":
            print("   ", x, "\n   ", y)
        diff += 1
        continue
    if np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
        same += 1
        continue
    diff += 1
    if x.dtype.kind in "fiub":
        d = np.abs(x.astype(np.float64) - y.astype(np.float64))
        print(
            f"{k}: DIFFERS max abs {d.max():.3g} at {np.unravel_index(d.argmax(), d.shape)}, "
            f"{(d > 0).sum()} of {d.size} elements; max |x| {np.abs(x).max():.3g}"
        )
    else:
        print(f"{k}: DIFFERS\n   {x}\n   {y}")
print(f"{same} keys bit-identical, {diff} differ")
