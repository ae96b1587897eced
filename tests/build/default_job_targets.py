"""`make run` builds what the default job runs and nothing else (issue: the first run waited for
every test program to compile).

Reads the Makefile's `run` rule: it must not depend on `build` (every target) and must build
CMake's fsdpp_default_job. Then asks Ninja what building fsdpp_default_job runs (`ninja -t
commands`): the programs the job starts (fsdpp-run, its store module, fsdpp-train) and
fsdpp-generate must be among its outputs, and nothing under tests/, bench/ or examples/, no
fuzzer and no other tool. Prints how many of the build's compile steps it takes.

usage: default_job_targets.py <build dir> <source dir>
"""
import pathlib
import re
import shlex
import subprocess
import sys

build, source = map(pathlib.Path, sys.argv[1:3])
fail = []

makefile = (source / "Makefile").read_text()
m = re.search(r"^run:(.*)\n((?:\t.*\n)+)", makefile, re.M)
if not m:
    sys.exit("Makefile: no `run:` rule")
prereqs, recipe = m.group(1).split(), m.group(2)
if "build" in prereqs:
    fail.append(f"Makefile: `run` depends on `build` (every target): {prereqs}")
if not re.search(r"cmake --build \$\(BUILD_DIR\).*--target fsdpp_default_job", recipe):
    fail.append(f"Makefile: `run` does not build --target fsdpp_default_job:\n{recipe}")


def outputs(target):
    text = subprocess.run(["ninja", "-C", str(build), "-t", "commands", target], check=True,
                          stdout=subprocess.PIPE, text=True).stdout
    outs = []
    for line in text.splitlines():
        words = shlex.split(line) if " -o " in line else []
        outs += [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-o"]
    return text, outs


text, outs = outputs("fsdpp_default_job")
for want in ("bin/fsdpp-run", "bin/fsdpp-train", "bin/fsdpp-generate",
             "lib/fsdpp/libfsdpp_run_store.so"):
    if want not in outs:
        fail.append(f"fsdpp_default_job does not build {want}")
tools = {"fsdpp-train", "fsdpp-run", "fsdpp-generate"}
for out in outs:
    parts = pathlib.PurePosixPath(out).parts
    if parts[0] in ("tests", "bench", "examples") or "fuzz" in out:
        fail.append(f"fsdpp_default_job builds {out}, which the default job does not run")
    elif parts[0] == "bin" and parts[-1] not in tools:
        fail.append(f"fsdpp_default_job builds the program {out}, which the default job does not run")
compiles = sum(1 for line in text.splitlines() if " -c " in line)
every = sum(1 for line in outputs("all")[0].splitlines() if " -c " in line)
if fail:
    sys.exit("\n".join(fail))
print(f"make run: fsdpp_default_job compiles {compiles} of the build's {every} files "
      f"(programs: {', '.join(sorted(o for o in outs if o.startswith('bin/')))}): OK")
