"""Runs the commands of a docs page, shortened, so that the docs cannot go stale.

usage: run_doc_commands.py BIN_DIR SOURCE_DIR PAGE [PAGE...]
       (PAGE: a path under SOURCE_DIR, e.g. docs/own-text.md, or README.md)

Every ```sh block of a page is run, in order, as one bash script (`set -euo pipefail`, so a
block's `cd` or variable carries to the next) in a scratch directory that looks like the top of
a clone: README.md, docs/, configs/ and scripts/ link to the sources and build/bin/ to BIN_DIR (the
built fsdpp-run, fsdpp-train, ...), so the page's relative paths work and its outputs (runs/...) never land in the source
tree. FSDPP_PYTHON is the Python with transformers.

Shortening: a page names its own substitutions, one per HTML comment, applied to its blocks'
text before they run (the page as rendered shows nothing of them):

    <!-- docs-test: training.max_steps=300 => training.max_steps=12 -->

README.md gets the substitutions in README_RULES below, since its "Two commands" block is
`make run`/`make test`: `make run` is run as the build target leaves it (scripts/default_job.sh,
what the Makefile's run target calls after building), shortened, then the prose's
fsdpp-generate command on the checkpoint it wrote; `make test` is not run (this is one of its
tests).
"""
import os
import re
import subprocess
import sys
import tempfile

bin_dir, src, pages = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:]
python = os.environ.get("FSDPP_PYTHON", sys.executable)

SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
RULE = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*=>\s*(.*?)\s*-->")

# README.md: the default job for 6 steps instead of 400.
README_RULES = [("checkpoint-400", "checkpoint-6")]


def readme_script(text):
    two = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    blocks = SH_BLOCK.findall(two)
    assert blocks and "make run" in blocks[0], f"README's Two commands has no `make run` block: {two!r}"
    makefile = open(os.path.join(src, "Makefile")).read()
    assert re.search(r"^run: build\n\tbash scripts/default_job\.sh \$\(BUILD_DIR\) \$\(ARGS\)$", makefile,
                     re.M), "the Makefile's run target is no longer scripts/default_job.sh: update this test"
    # The prose names the generate command that reads the default job's checkpoint.
    gen = re.search(r"`(build/bin/fsdpp-generate [^`]*)`", two.replace("\n", " "))
    assert gen, "README's Two commands no longer names an fsdpp-generate command"
    script = ("bash scripts/default_job.sh build training.max_steps=6 training.eval_steps=3\n"
              f"{gen.group(1)} --max-new-tokens 20\n")
    for a, b in README_RULES:
        script = script.replace(a, b)
    return script


def page_script(path):
    text = open(path, encoding="utf-8").read()
    if os.path.basename(path) == "README.md":
        return readme_script(text)
    blocks = SH_BLOCK.findall(text)
    assert blocks, f"{path} has no ```sh blocks"
    script = "\n".join(blocks)
    for a, b in RULE.findall(text):
        assert a in script, f"{path}: the docs-test rule '{a} => {b}' matches no command"
        script = script.replace(a, b)
    return script


failed = []
for page in pages:
    with tempfile.TemporaryDirectory() as d:
        for name in ("README.md", "docs", "configs", "scripts", "Makefile"):
            os.symlink(os.path.join(src, name), os.path.join(d, name))
        os.makedirs(os.path.join(d, "build"))
        os.symlink(os.path.abspath(bin_dir), os.path.join(d, "build", "bin"))
        script = "set -euo pipefail\nset -x\n" + page_script(os.path.join(src, page))
        print(f"==== {page}\n{script}", flush=True)
        env = dict(os.environ, FSDPP_PYTHON=python, HF_HUB_OFFLINE="1")
        r = subprocess.run(["bash", "-c", script], cwd=d, env=env)
        if r.returncode != 0:
            failed.append(page)
            print(f"==== {page}: a command failed (exit status {r.returncode})", flush=True)
        else:
            print(f"==== {page}: every command ran", flush=True)
if failed:
    sys.exit(f"docs with failing commands: {', '.join(failed)}")
