"""fsdpp's safetensors against the Python package's, both ways.

usage: safetensors_python.py <fsdpp_safetensors_tool>

1. The tool writes a file; safetensors.torch.load_file reads it and every tensor equals the
   values computed here independently (expected_from_cpp, kept in step with the tool).
2. safetensors.torch.save_file writes a file (bf16 included); the tool reads it, printing each
   tensor as JSON, and every value, dtype and shape equals what was saved.
"""

import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def expected_from_cpp():
    base = torch.arange(12, dtype=torch.float32).view(3, 4) * 0.5 - 1
    return {
        "f32": base,
        "f16": base.half(),
        "bf16": (torch.arange(-8, 8, dtype=torch.float32) * 0.125).view(4, 4).bfloat16(),
        "f64": torch.arange(5, dtype=torch.float64) / 3.0,
        "i64": torch.tensor([1 << 62, -7, 0], dtype=torch.int64),
        "i32": torch.arange(-3, 3, dtype=torch.int32),
        "i16": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8": torch.tensor([-128, 127, 0], dtype=torch.int8),
        "u8": torch.tensor([0, 255, 7], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "strided": torch.arange(6, dtype=torch.float32).view(2, 3).t(),
    }


def cpp_writes_python_reads(tool, tmp):
    path = os.path.join(tmp, "from_cpp.safetensors")
    subprocess.run([tool, "write", path], check=True)
    got = load_file(path)
    want = expected_from_cpp()
    check(sorted(got) == sorted(want), f"names {sorted(got)} != {sorted(want)}")
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            continue
        check(g.dtype == w.dtype and g.shape == w.shape and torch.equal(g, w),
              f"C++ -> Python '{name}': got {g.dtype} {tuple(g.shape)} {g}, want {w.dtype} "
              f"{tuple(w.shape)} {w}")
    with safe_open(path, framework="pt") as f:
        check(f.metadata() == {"format": "pt", "writer": "fsdpp"},
              f"C++ -> Python metadata {f.metadata()}")


def python_writes_cpp_reads(tool, tmp):
    torch.manual_seed(0)
    f = torch.randn(5, 7)
    tensors = {
        "layers.0.w": f,
        "layers.0.w_bf16": f.bfloat16(),
        "layers.0.w_f16": f.half(),
        "f64": torch.randn(3, dtype=torch.float64),
        "i64": torch.tensor([-(1 << 63), (1 << 63) - 1, 5], dtype=torch.int64),
        "i32": torch.randint(-1000, 1000, (2, 2), dtype=torch.int32),
        "i16": torch.tensor([-3, 3], dtype=torch.int16),
        "i8": torch.tensor([-128, 5], dtype=torch.int8),
        "u8": torch.tensor([255, 1, 2], dtype=torch.uint8),
        "mask": torch.tensor([[True, False], [False, True]]),
        "scalar_bf16": torch.tensor(-1.5, dtype=torch.bfloat16),
        "empty": torch.zeros(2, 0, dtype=torch.float16),
    }
    meta = {"format": "pt", "step": "17", "note": "héllo"}
    path = os.path.join(tmp, "from_python.safetensors")
    save_file(tensors, path, metadata=meta)
    out = subprocess.run([tool, "read", path], check=True, capture_output=True, text=True).stdout
    got = json.loads(out)
    check(got["metadata"] == meta, f"Python -> C++ metadata {got['metadata']} != {meta}")
    check(sorted(got["tensors"]) == sorted(tensors), f"names {sorted(got['tensors'])}")
    for name, w in tensors.items():
        g = got["tensors"].get(name)
        if g is None:
            continue
        check(g["dtype"] == DTYPES[w.dtype], f"'{name}' dtype {g['dtype']} != {DTYPES[w.dtype]}")
        check(tuple(g["shape"]) == tuple(w.shape), f"'{name}' shape {g['shape']} != {w.shape}")
        if w.is_floating_point():
            back = torch.tensor(g["values"], dtype=torch.float64).to(w.dtype).view(w.shape)
        elif w.dtype == torch.bool:
            back = torch.tensor(g["values"], dtype=torch.bool).view(w.shape)
        else:
            back = torch.tensor(g["values"], dtype=torch.int64).to(w.dtype).view(w.shape)
        check(torch.equal(back, w), f"Python -> C++ '{name}': got {back}, want {w}")


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="fsdpp_safetensors_") as tmp:
        cpp_writes_python_reads(tool, tmp)
        python_writes_cpp_reads(tool, tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("safetensors C++ <-> Python: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
