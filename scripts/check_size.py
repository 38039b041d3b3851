#!/usr/bin/env python3
"""Lists source files over MAX_FILE lines and functions over MAX_FUNC lines; exits 1 if any lacks
a reason. A file gives its reason as a `// long: <reason>` comment in its first lines; a function as
a `// long: <reason>` comment on the lines just above its header or on the first line of its body.

Functions are found by brace matching (comments, strings and character literals removed): a `{` at
namespace or class scope whose header holds a `)` opens a function; lambdas and nested blocks count
toward the function that holds them.

  scripts/check_size.py [PATH...]     (default: src)
"""
import os
import re
import sys

MAX_FILE = 500
MAX_FUNC = 80
REASON = re.compile(r"//\s*long:\s*\S")
EXTS = (".cc", ".h", ".c")


def strip(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
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
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_preprocessor(code):
    """Preprocessor lines (and their continuations) blanked."""
    out, cont = [], False
    for line in code.split("\n"):
        pp = cont or line.lstrip().startswith("#")
        cont = pp and line.rstrip().endswith("\\")
        out.append(" " * len(line) if pp else line)
    return "\n".join(out)


def functions(code):
    """(header start line, end line, name) of each function, 1-based lines."""
    stack = []  # "ns", "class", "func", "block"
    head_start = 0  # index where the current header began
    found = []
    func_start = None
    for i, c in enumerate(code):
        if c == ";" and "func" not in stack and "init" not in stack:
            head_start = i + 1
        if c == "{":
            if "func" in stack or "init" in stack:
                stack.append("block")
                continue
            header = code[head_start:i]
            words = header.split()
            if re.search(r"[=(,]\s*$", header):  # a braced initializer, maybe a default argument
                stack.append("init")
                continue
            if re.match(r"\s*(export\s+)?namespace\b", header) or header.strip().startswith('extern "'):
                stack.append("ns")
            elif ")" in header and not re.search(r"=\s*$", header):
                stack.append("func")
                # the header starts at its first non-blank character
                k = head_start
                while k < i and code[k].isspace():
                    k += 1
                name = re.findall(r"([\w:~<>=!+\-*/\[\]]+)\s*\(", header)
                func_start = (code.count("\n", 0, k) + 1, name[0] if name else "?")
            elif re.search(r"\b(class|struct|union|enum)\b", header) and words:
                stack.append("class")
            else:
                stack.append("block")
            head_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "block"
            if kind == "init":
                continue
            if kind == "func":
                found.append((func_start[0], code.count("\n", 0, i) + 1, func_start[1]))
            if "func" not in stack and "init" not in stack:
                head_start = i + 1
        elif c in ":" and "func" not in stack:
            # access specifiers (public:) end a header; "::" does not
            if code[i - 1 : i + 1] != "::" and code[i : i + 2] != "::":
                before = code[head_start:i].strip()
                if before in ("public", "private", "protected"):
                    head_start = i + 1
    return found


def check(path, problems):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    nlines = len(lines) - (1 if text.endswith("\n") else 0)
    if nlines > MAX_FILE:
        ok = any(REASON.search(l) for l in lines[:15])
        problems.append((ok, f"{path}: {nlines} lines (> {MAX_FILE})"))
    for start, end, name in functions(drop_preprocessor(strip(text))):
        length = end - start + 1
        if length <= MAX_FUNC:
            continue
        # a reason just above the header (its comment block) or on the first lines of its body
        above = lines[max(0, start - 6) : start - 1]
        body = lines[start - 1 : start + 2]
        ok = any(REASON.search(l) for l in above + body)
        problems.append((ok, f"{path}:{start}: {name}: {length} lines (> {MAX_FUNC})"))


def main(argv):
    roots = argv[1:] or ["src"]
    problems = []
    for root in roots:
        if os.path.isfile(root):
            check(root, problems)
            continue
        for d, _, files in sorted(os.walk(root)):
            for f in sorted(files):
                if f.endswith(EXTS):
                    check(os.path.join(d, f), problems)
    bad = 0
    for ok, msg in problems:
        print(("with a reason: " if ok else "NO REASON:     ") + msg)
        bad += not ok
    if bad:
        print(f"{bad} file(s)/function(s) over the limit without a `// long: <reason>` comment")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
