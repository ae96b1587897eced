"""No page of the docs ships with a placeholder left to fill.

usage: placeholders.py SOURCE_DIR

README.md and every docs/**/*.md are searched for `@@NAME@@` (NAME of capitals, digits and
underscores), the form a figure still to be measured is written in while a page is drafted. Each
one found is printed as page:line and the test fails; otherwise it prints how many pages it read.
"""
import glob
import os
import re
import sys

PLACEHOLDER = re.compile(r"@@[A-Z0-9_]+@@")


def pages(src):
    found = [os.path.join(src, "README.md")]
    found += sorted(glob.glob(os.path.join(src, "docs", "**", "*.md"), recursive=True))
    return [p for p in found if os.path.isfile(p)]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    files = pages(src)
    problems = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in PLACEHOLDER.finditer(line):
                    problems.append(f"{os.path.relpath(path, src)}:{n}: placeholder {m.group(0)} left unfilled")
    if problems:
        print("\n".join(problems))
        print(f"docs placeholders: {len(problems)} found in {len(files)} files")
        sys.exit(1)
    print(f"docs placeholders: OK ({len(files)} files)")


if __name__ == "__main__":
    main()
