"""Runs the commands of docs pages, shortened, so that the docs cannot go stale.

usage: run_doc_commands.py BIN_DIR SOURCE_DIR PAGE [PAGE...]
       (PAGE: a path under SOURCE_DIR, e.g. docs/own-text.md, or README.md)

Every ```sh block of a page is run, in order, as one bash script (`set -euo pipefail`, so a
block's `cd` or variable carries to the next), except the blocks marked as examples that need what
this machine lacks (`<!-- docs-example: needs a SLURM cluster -->` just before the block,
doc_blocks.py; audit_doc_commands.py checks that every other block is run by a docs test). Each
page runs in its own scratch directory that looks like the top of a fresh clone: README.md, docs/,
configs/, examples/, scripts/ and the Makefile link to the sources and build/bin/ to BIN_DIR (the
built fsdpp-run, fsdpp-train, ...), so the page's relative paths work and its outputs (runs/...)
never land in the source tree. FSDPP_PYTHON is the Python with transformers.

Shortening: a page names its own substitutions, one per HTML comment, applied to its blocks'
text before they run (the page as rendered shows nothing of them):

    <!-- docs-test: training.max_steps=300 => training.max_steps=12 -->

and a page whose commands read what another page's wrote (runs/default/checkpoint-400 after
`make run`) names the command that writes it, run first:

    <!-- docs-test-before: make run -->

A rule among the comment lines just before a block's fence applies to that block alone, and
`docs-test-after: CMD` runs CMD after the page's blocks (e.g. to wait for the commands a rule put
in the background, the two nodes of multi-node.md on this one machine).

`make run` (a line of its own) runs as the build target leaves it (scripts/default_job.sh, what the
Makefile's run target calls after building) for 6 steps instead of 400: pages that read its
checkpoint say `<!-- docs-test: checkpoint-400 => checkpoint-6 -->`. README.md's "Two commands"
block is `make run`/`make test`: `make run` is run so, then the prose's fsdpp-generate command on
the checkpoint it wrote; `make test` is not run (this is one of its tests).
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_blocks import sh_blocks  # noqa: E402

RULE = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*=>\s*(.*?)\s*-->")
BEFORE = re.compile(r"<!--\s*docs-test-before:\s*(.*?)\s*-->")
AFTER = re.compile(r"<!--\s*docs-test-after:\s*(.*?)\s*-->")

# README.md: the default job for 6 steps instead of 400.
README_RULES = [("checkpoint-400", "checkpoint-6")]
MAKE_RUN = re.compile(r"^make run(\s+#.*)?$", re.M)
DEFAULT_JOB = "bash scripts/default_job.sh build training.max_steps=6 training.eval_steps=3"


def check_make_run(src):
    makefile = open(os.path.join(src, "Makefile")).read()
    assert re.search(r"^run: configure\n\tcmake --build \$\(BUILD_DIR\) .*--target fsdpp_default_job\n"
                     r"\tbash scripts/default_job\.sh \$\(BUILD_DIR\) \$\(ARGS\)$", makefile,
                     re.M), "the Makefile's run target is no longer scripts/default_job.sh: update this test"


def readme_two_commands(src, text):
    """README's "Two commands" block: its line number and the script it stands for."""
    two = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    blocks = sh_blocks(two)
    assert blocks and "make run" in blocks[0].text, f"README's Two commands has no `make run` block: {two!r}"
    check_make_run(src)
    # The prose names the generate command that reads the default job's checkpoint.
    gen = re.search(r"`(build/bin/fsdpp-generate [^`]*)`", two.replace("\n", " "))
    assert gen, "README's Two commands no longer names an fsdpp-generate command"
    script = f"{DEFAULT_JOB}\n{gen.group(1)} --max-new-tokens 20\n"
    for a, b in README_RULES:
        script = script.replace(a, b)
    line = text.count("\n", 0, text.index("## Two commands")) + blocks[0].line
    return line, script


def run_blocks(src, page):
    """The blocks of a page that its docs test runs, in order, their text with the rules just
    before each block applied (the page's other rules apply to the whole script)."""
    text = open(os.path.join(src, page), encoding="utf-8").read()
    blocks = []
    for b in sh_blocks(text):
        if b.reason is not None:
            continue
        for x, y in b.rules:
            assert x in b.text, f"{page}:{b.line}: the docs-test rule '{x} => {y}' matches nothing in its block"
            b.text = b.text.replace(x, y)
        blocks.append(b)
    if os.path.basename(page) == "README.md":
        line, script = readme_two_commands(src, text)
        for b in blocks:
            b.text = script if b.line == line else b.text
    return blocks


def page_script(src, page):
    text = open(os.path.join(src, page), encoding="utf-8").read()
    blocks = run_blocks(src, page)
    assert blocks, f"{page} has no ```sh blocks that are not marked docs-example"
    script = "\n".join(BEFORE.findall(text) + [b.text for b in blocks] + AFTER.findall(text))
    if MAKE_RUN.search(script):
        check_make_run(src)
        script = MAKE_RUN.sub(DEFAULT_JOB, script)
    block_rules = {r for b in blocks for r in b.rules}
    for a, b in RULE.findall(text):
        if (a, b) in block_rules:
            continue
        assert a in script, f"{page}: the docs-test rule '{a} => {b}' matches no command"
        script = script.replace(a, b)
    return script


def main(bin_dir, src, pages):
    python = os.environ.get("FSDPP_PYTHON", sys.executable)
    failed, took = [], []
    for page in pages:
        with tempfile.TemporaryDirectory() as d:
            for name in ("README.md", "docs", "configs", "examples", "scripts", "Makefile"):
                os.symlink(os.path.join(src, name), os.path.join(d, name))
            os.makedirs(os.path.join(d, "build"))
            os.symlink(os.path.abspath(bin_dir), os.path.join(d, "build", "bin"))
            script = "set -euo pipefail\nset -x\n" + page_script(src, page)
            print(f"==== {page}\n{script}", flush=True)
            env = dict(os.environ, FSDPP_PYTHON=python, HF_HUB_OFFLINE="1")
            t0 = time.monotonic()
            r = subprocess.run(["bash", "-c", script], cwd=d, env=env)
            took.append(f"{page} {time.monotonic() - t0:.1f} s")
            if r.returncode != 0:
                failed.append(page)
                print(f"==== {page}: a command failed (exit status {r.returncode})", flush=True)
            else:
                print(f"==== {page}: every command ran", flush=True)
    print("==== time per page: " + ", ".join(took), flush=True)
    if failed:
        sys.exit(f"docs with failing commands: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3:])
