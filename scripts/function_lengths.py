#!/usr/bin/env python3
"""Lines per function body in C++ sources, by a brace-counting pass (no compiler needed).

  scripts/function_lengths.py [--over N] [--top K] DIR...

A function is a brace block at namespace or class level whose introducing text holds a
parameter list (lambdas and local blocks count toward the function around them). Its length
runs from the first line of its declaration to its closing brace, as a reader scrolls it.
Prints, per DIR, the longest function, then every function over N lines (default 80), or the
K longest with --top. Exit status 1 when any function is over N (for CI).
"""
import argparse
import os
import re
import sys

CONTROL = re.compile(r"^(if|for|while|switch|catch|do|else|try|return)\b")
CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|^extern\s+\"C\"")


def strip(text):
    """Blanks comments, string and char literals (keeping newlines), so braces in them vanish."""
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
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000) is not a char literal.
            if c == "'" and i > 0 and text[i - 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """Yields (name, first_line, last_line) for every top-level function body in `path`."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip(f.read())
    text = re.sub(r"^[ \t]*#.*$", "", text, flags=re.M)  # preprocessor lines
    stack = []  # per open brace: "container", "function" or "block"
    intro_start = 0  # offset where the current statement's text began
    for i, c in enumerate(text):
        if c in ";{}":
            if c == "{":
                intro = " ".join(text[intro_start:i].split())
                in_function = any(k == "function" for k, _, _ in stack)
                if in_function:
                    kind = "block"
                elif CONTAINER.search(intro) or not intro:
                    kind = "container"
                elif "(" in intro and not CONTROL.match(intro) and not intro.endswith("="):
                    kind = "function"
                else:
                    kind = "block"  # an initialiser, an array, a requires-clause...
                if kind == "function":
                    start = intro_start + len(text[intro_start:i]) - len(text[intro_start:i].lstrip())
                    name = re.sub(r"\s*\(.*", "", intro.split(")")[0] + "(")
                    name = name.split()[-1] if name.split() else "?"
                    stack.append(("function", name, text.count("\n", 0, start) + 1))
                else:
                    stack.append((kind, None, None))
            elif c == "}":
                if stack:
                    kind, name, line = stack.pop()
                    if kind == "function":
                        yield name, line, text.count("\n", 0, i) + 1
            intro_start = i + 1
        elif c == ":" and text[i - 1 : i + 1] != "::" and text[i : i + 2] != "::":
            # "public:" / "case x:" end a statement's introduction; a ctor's init list does not.
            head = " ".join(text[intro_start:i].split())
            if re.fullmatch(r"(public|private|protected|case .*|default)", head):
                intro_start = i + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--over", type=int, default=80)
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    over_any = False
    for d in args.dirs:
        found = []
        for root, dirs, files in os.walk(d):
            dirs[:] = [x for x in dirs if x not in ("build", "target", ".git")]
            for fn in files:
                if fn.endswith((".cpp", ".hpp", ".h", ".cc", ".c")):
                    p = os.path.join(root, fn)
                    for name, a, b in functions(p):
                        found.append((b - a + 1, p, a, name))
        found.sort(reverse=True)
        if not found:
            print(f"{d}: no functions")
            continue
        n, p, a, name = found[0]
        print(f"{d}: longest {n} lines, {name} ({p}:{a}); {len(found)} functions")
        shown = found[: args.top] if args.top else [f for f in found if f[0] > args.over]
        for n, p, a, name in shown:
            print(f"  {n:4d}  {name}  {p}:{a}")
        over_any |= any(f[0] > args.over for f in found)
    return 1 if over_any else 0


if __name__ == "__main__":
    sys.exit(main())
