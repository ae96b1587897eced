"""No function in src/ or tools/ is longer than 250 lines (the house style: functions short).

Scans every C++ file (.cpp, .cc, .h, .hpp) under the given folders of the source tree and names,
as file:line, each function whose body spans more than the limit: from the line of its name to
the line of its closing brace, as lizard counts a function's length. Comments, string literals
(raw ones too) and character literals are blanked first, so a brace inside them counts for
nothing; a lambda, a local class or a nested block counts within the function around it.

A function is a brace block whose head (the text since the previous `;`, `{` or `}`) ends in a
parameter list's `)` (after qualifiers, a trailing return type or a constructor's initialisers)
and does not open a control statement (if, for, while, switch, catch). Namespaces, classes and
other blocks are walked into, and functions are looked for inside them. A lambda passed to a
call at namespace scope (a validator's, say) counts as a function of its own.

Its lengths are lizard's (`lizard -L 250 -w src tools`) for every function of src/ and tools/.

usage: function_length.py <source dir> [--limit N] [folder...]   (folders default to src tools)
"""
import pathlib
import re
import sys

EXTENSIONS = {".cpp", ".cc", ".h", ".hpp"}
CONTROL = {"if", "for", "while", "switch", "catch", "do", "else", "return", "sizeof", "decltype",
           "alignof", "noexcept", "requires", "static_assert"}
# What may follow a parameter list before the body: qualifiers, a trailing return type, an
# initialiser list, attributes.
TAIL = re.compile(r"\)\s*(?:const\b|volatile\b|noexcept\b(?:\s*\([^()]*\))?|override\b|final\b|mutable\b|"
                  r"&&|&|->[^{;]*|\[\[[^\]]*\]\]|\s)*$")
RAW_STRING = re.compile(r'R"([^()\\\s]{0,16})\(')


def digit_separator(text, i):
    """Whether the ' at i separates digits (1'000'000, 0xFF'FF) rather than opening a character."""
    k = i
    while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_'."):
        k -= 1
    return k < i and text[k].isdigit()


def blank(text):
    """`text` with comments, strings and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and (m := RAW_STRING.match(text, i)) and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
                                                                  and text[i - 1] not in "uU8L"):
            end = text.find(")" + m.group(1) + '"', m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c == "'" and not digit_separator(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


INIT_LIST = re.compile(r"\)\s*(?:noexcept\b\s*)?:(?!:)")


def strip_template_arguments(text):
    """`text` without the balanced <...> it ends with (read_value<std::vector<int>> -> read_value)."""
    depth = 0
    for k in range(len(text) - 1, -1, -1):
        if text[k] == ">":
            depth += 1
        elif text[k] == "<":
            depth -= 1
            if depth == 0:
                return text[:k].rstrip()
    return ""


def function_name_at(head):
    """Where, in the text before a `{`, the name of the function whose body it opens is (an
    offset into `head`), or None when the brace opens something else."""
    head = re.sub(r"#[^\n]*", lambda m: " " * len(m.group(0)), head)  # preprocessor lines
    init = INIT_LIST.search(head)
    if init:  # a constructor: `X(...) : a_(x), b_{y} {` -- its parameter list ends at the `)`
        head = head[:init.start() + 1]
    if not head.strip() or not TAIL.search(head):
        return None
    # The parameter list's `(`, matched from its `)`.
    k = head.rstrip().rfind(")")
    depth = 0
    while k >= 0:
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    if k <= 0:
        return None
    before = head[:k].rstrip()
    if before.endswith("]"):  # a lambda: [captures](params)
        return before.rfind("[")
    while before.endswith(">") and not before.endswith("operator>") and not before.endswith("->"):
        before = strip_template_arguments(before)
    word = re.search(r"(operator\s*(?:\(\)|[^\s(]+)|[A-Za-z_~]\w*)\s*$", before)
    if not word or word.group(1) in CONTROL:
        return None
    return word.start(1)


def functions(text):
    """(first line, last line) of every outermost function in blanked `text`; a lambda, a local
    class or a block inside a function belongs to it."""
    found = []
    stack = []  # per open brace: the line its function starts on, "init" for an initialiser, or None
    parens = []  # outside functions, per open `(`: where its current argument starts
    head_start = 0
    depth_in_function = 0
    for i, c in enumerate(text):
        if depth_in_function == 0 and c in "(),":
            if c == "(":
                parens.append(i + 1)
            elif c == ")" and parens:
                parens.pop()
            elif c == "," and parens:
                parens[-1] = i + 1
        elif c == ";":
            head_start = i + 1
        elif c == "{":
            if depth_in_function:
                depth_in_function += 1
                stack.append(None)
                continue
            # Inside parentheses (a default argument's {}, a lambda passed to a call) the head is
            # the argument's text; a brace that opens no lambda is an initialiser.
            head = text[parens[-1]:i] if parens else text[head_start:i]
            if parens or (INIT_LIST.search(head) and re.search(r"[\w>]\s*$", head)):
                name = function_name_at(head) if parens else None
                if name is None:
                    stack.append("init")  # {x} as an argument, or a member's in a constructor's list
                    continue
            else:
                name = function_name_at(head)
            head_at = parens[-1] if parens else head_start
            if name is None:
                stack.append(None)
            else:
                stack.append(text.count("\n", 0, head_at + name) + 1)
                depth_in_function = 1
            head_start = i + 1
        elif c == "}":
            if not stack:
                continue
            start = stack.pop()
            if start == "init":
                continue
            if depth_in_function:
                depth_in_function -= 1
            if isinstance(start, int):
                found.append((start, text.count("\n", 0, i) + 1))
            head_start = i + 1
    return found


def main(argv):
    args = list(argv[1:])
    limit = 250
    if "--limit" in args:
        k = args.index("--limit")
        limit = int(args[k + 1])
        del args[k:k + 2]
    if not args:
        sys.exit(__doc__)
    root = pathlib.Path(args[0])
    folders = args[1:] or ["src", "tools"]
    long_ones = []
    count = 0
    for folder in folders:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in EXTENSIONS or not path.is_file():
                continue
            for first, last in functions(blank(path.read_text(errors="replace"))):
                count += 1
                if last - first + 1 > limit:
                    long_ones.append(f"{path.relative_to(root)}:{first}: {last - first + 1} lines")
    for line in long_ones:
        print(line)
    if long_ones:
        print(f"function_length: {len(long_ones)} function(s) over {limit} lines; split them into named "
              f"functions")
        return 1
    print(f"function_length: {count} functions in {', '.join(folders)}, none over {limit} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
