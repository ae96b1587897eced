"""README's benchmark summary quotes only figures that the committed result holds.

usage: bench_figures.py SOURCE_DIR

The summary is each paragraph of README.md (text between blank lines) that links
bench/results/latest.md (the result `make bench` writes) or docs/benchmarks.md#latest-results and
quotes a ratio (0.77x). Every ratio it quotes (0.77x, and 0.86 of a range 0.86-0.89x) must be a
value of latest.md's "fsdpp / PyTorch" column, and every other number (1.012, 678, 2.4e-07, the
run's date ...; not the digits inside a word such as FSDP2, nor a link's target) a number written
somewhere in latest.md. A new result that changes a ratio, or a summary written from another
run, fails here with the figures latest.md lacks. A README with no such paragraph fails too.
"""
import os
import re
import sys

LATEST = "bench/results/latest.md"
# A number standing on its own: not inside a word (FSDP2, Qwen3) or another number.
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?(?:e[-+]?\d+)?")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


def numbers(text):
    return NUMBER.findall(LINK_TARGET.sub("]", text))


# 0.77x, and the first end of a range 0.86-0.89x (en dash or hyphen).
RATIO = re.compile(r"(?<![A-Za-z0-9_.])(\d+\.\d+)(?:x\b|(?=[\u2013-]\d+\.\d+x\b))")
RATIO_COLUMN = "fsdpp / PyTorch"


def ratio_column(latest):
    """The values of every table column of latest.md headed "fsdpp / PyTorch" (the speed ratios)."""
    values, column = set(), None
    for line in latest.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if column is None:
            column = cells.index(RATIO_COLUMN) if RATIO_COLUMN in cells else -1
        elif column >= 0 and column < len(cells) and not set(cells[column]) <= set("-: "):
            values.add(cells[column].strip("*"))
    if not values:
        sys.exit(f"{LATEST}: no table column headed '{RATIO_COLUMN}': update this test to the report's format")
    return values
LINKS = (f"]({LATEST})", "](docs/benchmarks.md#latest-results)")


def summaries(readme):
    """The paragraphs of the summary: they link the latest result and quote a ratio."""
    paragraphs = re.split(r"\n\s*\n", readme)
    found = [p for p in paragraphs if any(link in p for link in LINKS) and RATIO.search(p)]
    if not found:
        sys.exit(f"README.md: no paragraph links {LATEST} (or docs/benchmarks.md#latest-results) and "
                 f"quotes a ratio (0.NNx): where is the benchmark summary?")
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    readme = open(os.path.join(src, "README.md"), encoding="utf-8").read()
    latest_text = open(os.path.join(src, LATEST), encoding="utf-8").read()
    latest, speed_ratios = set(numbers(latest_text)), ratio_column(latest_text)
    failed, quoted, ratios, lines = False, 0, 0, []
    for para in summaries(readme):
        line = readme.count("\n", 0, readme.index(para)) + 1
        lines.append(f"README.md:{line}")
        numbers_here, ratios_here = numbers(para), RATIO.findall(para)
        quoted += len(numbers_here)
        ratios += len(ratios_here)
        wrong = [r + "x" for r in ratios_here if r not in speed_ratios]
        if wrong:
            failed = True
            print(f"README.md:{line}: the benchmark summary quotes {', '.join(wrong)}, not in {LATEST}'s "
                  f"'{RATIO_COLUMN}' column ({', '.join(sorted(speed_ratios))}): rewrite the summary from {LATEST}")
        missing = [q for q in numbers_here if q not in latest]
        if missing:
            failed = True
            print(f"README.md:{line}: the benchmark summary quotes {', '.join(missing)}, which {LATEST} "
                  f"does not hold: rewrite the summary from {LATEST}")
    if failed:
        sys.exit(1)
    print(f"docs bench figures: OK ({quoted} numbers, {ratios} ratios of {', '.join(lines)} in {LATEST})")


if __name__ == "__main__":
    main()
