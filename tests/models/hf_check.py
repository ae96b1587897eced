"""What the Hugging Face interop tests of tests/models share: transformers quiet and offline (a
random config needs no network), the token ids every test feeds both sides, running fsdpp's
tools, comparing tensors and reading a directory's safetensors."""
import os
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from safetensors.torch import load_file
import transformers

transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()

TOL = 1e-5
IDS = [[3, 17, 42, 0, 9, 55, 23, 8, 31, 60, 12, 5], [7, 7, 1, 44, 2, 90, 13, 61, 29, 4, 38, 50]]
IDS_ARG = ";".join(",".join(map(str, r)) for r in IDS)


def sh(*cmd, ok=True):
    """Runs cmd; exits naming it when it failed (or, with ok=False, when it succeeded)."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if (r.returncode == 0) != ok:
        sys.exit(f"command {'failed' if ok else 'succeeded'} ({r.returncode}): {' '.join(cmd)}\n{r.stdout}")
    return r.stdout


def compare(what, a, b, tol=TOL):
    d = (torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs().max().item()
    print(f"{what}: max |diff| {d:.3g}")
    assert d < tol, f"{what}: {d} >= {tol}"
    return d


def tensors_of(d):
    """Every tensor of the .safetensors files in directory d (sharded or not)."""
    t = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            t.update(load_file(os.path.join(d, f)))
    return t
