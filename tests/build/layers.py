"""The build refuses an include that climbs (docs/architecture.md, "Layers").

Compiles, with the exact flags a layer's sources get (compile_commands.json), one file that
includes a public header of a layer the layer may use (it must compile) and one that includes a
header of a layer above it (it must fail with "file not found"). Then runs the layer check on a
file that reaches into another folder's private headers (it must fail, naming the file).

usage: layers.py <build dir> <source dir>
"""
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile

build, source = map(pathlib.Path, sys.argv[1:3])
commands = json.loads((build / "compile_commands.json").read_text())

# layer -> (a header it may include, a header of a layer above it)
CASES = {
    "config": ("fsdpp/common/error.h", "fsdpp/dist/world.h"),
    "dist": ("fsdpp/common/error.h", "fsdpp/fsdp/fully_shard.h"),
    "observe": ("fsdpp/dist/world.h", "fsdpp/train/config.h"),
    "fsdp": ("fsdpp/dist/process_group.h", "fsdpp/state/state_dict.h"),
    "moe": ("fsdpp/fsdp/fully_shard.h", "fsdpp/models/qwen3_moe.h"),
    "cp": ("fsdpp/dist/process_group.h", "fsdpp/models/llama.h"),
    "state": ("fsdpp/fsdp/sharded_param.h", "fsdpp/models/llama.h"),
    "models": ("fsdpp/state/safetensors.h", "fsdpp/parallel/parallelize.h"),
    "parallel": ("fsdpp/models/model_plan.h", "fsdpp/train/config.h"),
    "estimate": ("fsdpp/models/llama.h", "fsdpp/train/trainer.h"),
    "distill": ("fsdpp/parallel/parallelize.h", "fsdpp/train/config.h"),
}


def layer_command(layer):
    for c in commands:
        if f"/src/{layer}/" in c["file"] and c["file"].endswith(".cpp"):
            return c
    sys.exit(f"no compile command for a source of src/{layer}/ in {build}/compile_commands.json")


def compile_with(cmd, text, tmp):
    src = pathlib.Path(tmp) / "probe.cpp"
    src.write_text(text)
    args = [a for a in shlex.split(cmd["command"]) if a != "ccache"]
    args[args.index("-c") + 1] = str(src)
    args[args.index("-o") + 1] = str(pathlib.Path(tmp) / "probe.o")
    args.append("-fsyntax-only")
    return subprocess.run(args, cwd=cmd["directory"], capture_output=True, text=True)


failures = []
with tempfile.TemporaryDirectory() as tmp:
    for layer, (allowed, above) in CASES.items():
        cmd = layer_command(layer)
        ok = compile_with(cmd, f'#include "{allowed}"\n', tmp)
        if ok.returncode != 0:
            failures.append(f"src/{layer}: including {allowed} (a layer below) failed:\n{ok.stderr[:2000]}")
        bad = compile_with(cmd, f'#include "{above}"\n', tmp)
        if bad.returncode == 0 or "file not found" not in bad.stderr:
            failures.append(f"src/{layer}: including {above} (a layer above) did not fail with "
                            f"'file not found' (rc {bad.returncode}):\n{bad.stderr[:2000]}")
        else:
            print(f"src/{layer}: {allowed} compiles, {above} is refused")

    probe = pathlib.Path(tmp) / "reach.cpp"
    probe.write_text('#include "../fsdp/fsdp_unit.h"\n')
    r = subprocess.run(["cmake", "-DLAYER=state", f"-DSTAMP={tmp}/stamp", f"-DFILES={probe}",
                        "-P", str(source / "cmake" / "check_layer_includes.cmake")],
                       capture_output=True, text=True)
    if r.returncode == 0 or "reach.cpp" not in r.stderr or "private headers" not in r.stderr:
        failures.append(f"the layer check passed a '../fsdp/' include (rc {r.returncode}):\n{r.stderr}")
    else:
        print("the layer check refuses '#include \"../fsdp/fsdp_unit.h\"'")

if failures:
    print("\n\n".join(failures))
    sys.exit(1)
