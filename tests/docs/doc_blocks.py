"""The ```sh blocks of the docs, and which of them a docs test leaves out, and why.

A block that no docs test runs is marked just before it with one HTML comment (the page as rendered
shows nothing of it) giving one of REASONS:

    <!-- docs-example: needs a SLURM cluster -->
    ```sh
    sbatch examples/slurm/per-rank.sbatch configs/default.yaml
    ```

`tested by <ctest name>` says which other test runs the same commands (e.g. `make install` by
package.find_package); the audit (audit_doc_commands.py) checks that the test exists.
"""
import re

SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
EXAMPLE = re.compile(r"<!--\s*docs-example:\s*(.*?)\s*-->")
# The reasons a docs command is not run by a test on this machine: a closed list.
REASONS = (
    "needs a GPU",
    "needs a SLURM cluster",
    "needs a Kubernetes cluster",
    "needs a container engine",
    "needs several machines",
    "needs a model download",
    "the bench: minutes",
    "long: minutes",
)
TESTED_BY = re.compile(r"tested by ([A-Za-z0-9_.]+)$")


RULE = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*=>\s*(.*?)\s*-->")
COMMENT = re.compile(r"<!--.*-->")


class Block:
    def __init__(self, line, text, reason, rules):
        self.line, self.text, self.reason, self.rules = line, text, reason, rules


def sh_blocks(text):
    """Every ```sh block of a page: its first line's number (the fence's), its text, the reason
    given by a docs-example comment among the comment lines just before its fence (None if none),
    and the docs-test rules among those lines (which apply to this block alone)."""
    blocks = []
    for m in SH_BLOCK.finditer(text):
        comments = []
        for line in reversed(text[:m.start()].rstrip("\n").split("\n")):
            if not COMMENT.fullmatch(line.strip()):
                break
            comments.insert(0, line.strip())
        reasons = [e.group(1) for c in comments for e in [EXAMPLE.fullmatch(c)] if e]
        rules = [r.groups() for c in comments for r in [RULE.fullmatch(c)] if r]
        blocks.append(Block(text.count("\n", 0, m.start()) + 1, m.group(1), reasons[0] if reasons else None, rules))
    return blocks


def reason_error(reason, test_names):
    """None when a docs-example reason is accepted, else what is wrong with it."""
    if reason in REASONS:
        return None
    t = TESTED_BY.fullmatch(reason)
    if t:
        return None if t.group(1) in test_names else f"'{reason}': no test named {t.group(1)}"
    return (f"'{reason}' is not an accepted reason; accepted: "
            + ", ".join(f"'{r}'" for r in REASONS) + ", 'tested by <ctest name>'")
