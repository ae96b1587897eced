"""Every shell command a newcomer would copy from the docs is run by a test, or says why not.

usage: audit_doc_commands.py SOURCE_DIR

Every ```sh block of README.md and docs/*.md is either run by a docs test (its page is one that a
test in tests/CMakeLists.txt passes to run_doc_commands.py, which runs every block not marked) or
marked among the comment lines just before its fence with `<!-- docs-example: REASON -->`, REASON one of doc_blocks.REASONS
or `tested by <ctest name>` naming a test that exists. Each block that is neither fails the audit
with its page and line; so does a marker with another reason, and a marker that stands before no
```sh block (a stale one).
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_blocks import EXAMPLE, reason_error, sh_blocks  # noqa: E402


def cmake_tests(src):
    """The names of every CTest test, and the pages passed to run_doc_commands.py."""
    names, run_pages = set(), set()
    for path in glob.glob(os.path.join(src, "tests", "**", "CMakeLists.txt"), recursive=True):
        text = open(path).read()
        # add_test(NAME name ...) and tests/CMakeLists.txt's fsdpp_test(name label timeout ...).
        names |= set(re.findall(r"add_test\(\s*NAME\s+([A-Za-z0-9_.]+)", text))
        names |= set(re.findall(r"fsdpp_test\(\s*([A-Za-z0-9_.]+)\s", text))
        for call in re.findall(r"(?:add_test|fsdpp_test)\((.*?)\)\s*$", text, re.M | re.S):
            if "run_doc_commands.py" in call:
                args = call.split("run_doc_commands.py", 1)[1].split()
                run_pages |= {a for a in args if a.endswith(".md")}
    return names, run_pages


def audit(src):
    names, run_pages = cmake_tests(src)
    problems, counts = [], {"run": 0, "marked": 0}
    pages = ["README.md"] + sorted(os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md")))
    for page in run_pages:
        if not os.path.isfile(os.path.join(src, page)):
            problems.append(f"{page}: a docs test runs this page, which does not exist")
    for page in pages:
        text = open(os.path.join(src, page), encoding="utf-8").read()
        blocks = sh_blocks(text)
        for b in blocks:
            if b.reason is not None:
                counts["marked"] += 1
                err = reason_error(b.reason, names)
                if err:
                    problems.append(f"{page}:{b.line}: docs-example {err}")
            elif page in run_pages:
                counts["run"] += 1
            else:
                problems.append(f"{page}:{b.line}: this ```sh block is run by no docs test and not marked "
                                f"`<!-- docs-example: REASON -->`: add its page to a docs test in "
                                f"tests/CMakeLists.txt (shortened with docs-test rules) or mark it")
        if len(EXAMPLE.findall(text)) != sum(b.reason is not None for b in blocks):
            problems.append(f"{page}: a docs-example marker stands before no ```sh fence (it must be among "
                            f"the comment lines just before one)")
    return problems, counts


if __name__ == "__main__":
    problems, counts = audit(os.path.abspath(sys.argv[1]))
    for p in problems:
        print(p)
    if problems:
        sys.exit(f"{len(problems)} docs command problem(s)")
    print(f"every ```sh block is run by a docs test ({counts['run']}) or marked with its reason ({counts['marked']})")
