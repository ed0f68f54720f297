#!/usr/bin/python3
"""Writes the values table of charts/cryo/README.md from the comments in values.yaml.

  values_doc.py [--check]     rewrite the table between the markers, or (--check) fail if stale

A key is documented by the comment block just above it that starts with "# -- "; the table
shows its dotted path, its default (JSON) and the comment. Every leaf must have one: --check
fails on an undocumented value, so values.yaml stays commented.
"""
import json
import re
import sys

import yaml

ROOT = __file__.rsplit("/deploy/", 1)[0]
VALUES = f"{ROOT}/charts/cryo/values.yaml"
README = f"{ROOT}/charts/cryo/README.md"
BEGIN, END = "<!-- values:begin -->", "<!-- values:end -->"


def documented():
    """(path, comment) for each key with a '# --' comment, in file order."""
    out, stack, comment = [], [], None
    for line in open(VALUES):
        if not line.strip():
            comment = None
            continue
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if text.startswith("# -- "):
            comment = [text[5:]]
            continue
        if text.startswith("#"):
            if comment is not None:
                comment.append(text[1:].strip())
            continue
        m = re.match(r"([A-Za-z0-9_.-]+):", text)
        if not m or text.startswith("- "):
            comment = None
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(1)))
        if comment is not None:
            out.append((".".join(k for _, k in stack), " ".join(comment)))
        comment = None
    return out


def lookup(values, path):
    v = values
    for k in path.split("."):
        v = v[k]
    return v


def leaves(v, path=""):
    if isinstance(v, dict) and v:
        for k, x in v.items():
            yield from leaves(x, f"{path}.{k}" if path else k)
    else:
        yield path


def table():
    values = yaml.safe_load(open(VALUES))
    docs = documented()
    paths = {p for p, _ in docs}
    missing = [l for l in leaves(values)
               if not any(l == p or l.startswith(p + ".") for p in paths)]
    if missing:
        sys.exit("values_doc: undocumented values (add a '# -- ' comment): " + ", ".join(missing))
    rows = ["| value | default | meaning |", "| --- | --- | --- |"]
    for p, c in docs:
        d = json.dumps(lookup(values, p)).replace("|", "\\|")
        c = c.replace("|", "\\|")
        rows.append(f"| `{p}` | `{d}` | {c} |")
    return "\n".join(rows)


def main():
    text = open(README).read()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if "--check" in sys.argv:
        if new != text:
            sys.exit("values_doc: charts/cryo/README.md is stale: run deploy/chart-render/values_doc.py")
        print("values_doc: charts/cryo/README.md documents every value")
    elif new != text:
        open(README, "w").write(new)


if __name__ == "__main__":
    main()
