"""Checks the commands the docs show against the code (issue 38: doc claims that were wrong).

Every shell block (```sh, ```bash, ```console, ```shell) of README.md, charts/cryo/README.md and
docs/ is read, continuation lines joined, prompts and `sudo` dropped. Then:
  - `cryo SUB ...`: SUB is a command of `cryo --help`, every --flag is in it;
  - `kubectl cryo SUB ...`: SUB is a command of `kubectl-cryo --help`, every --flag is in its
    help or in `kubectl-cryo SUB --help`;
  - `cryod ...`, `cryo-cri-shim ...`: every --flag is in the binary's --help;
  - `helm install|upgrade|template ... --set[-string] K=V`: K is a path of
    charts/cryo/values.schema.json;
  - `bash scripts/X`, `scripts/X`, `bash e2e/...`: the file exists.
A line that breaks one of these fails the test, naming the file and line.

    python3 check_doc_commands.py SOURCE_DIR BUILD_DIR [--only DOC --expect N]

--only checks one document instead (the test's own, test/docs/wrong_commands.md, whose every
command is wrong once) and --expect says how many failures it must find: the check can fail.
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

SRC, BUILD = sys.argv[1], sys.argv[2]
OPTS = dict(zip(sys.argv[3::2], sys.argv[4::2]))
BINS = {
    "cryo": os.path.join(BUILD, "clients/cryo"),
    "kubectl cryo": os.path.join(BUILD, "clients/kubectl/kubectl-cryo"),
    "cryod": os.path.join(BUILD, "daemon/cryod"),
    "cryo-cri-shim": os.path.join(BUILD, "cri-shim/cryo-cri-shim"),
}
_help = {}


def help_of(tool, sub=None):
    key = (tool, sub)
    if key not in _help:
        argv = [BINS[tool]] + ([sub] if sub else []) + ["--help"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        _help[key] = r.stdout + r.stderr
    return _help[key]


def commands_of(tool):
    text = help_of(tool)
    if tool == "cryo":
        return set(re.findall(r"^  ([a-z]+)\b", text.split("Commands:")[1].split("Options:")[0], re.M))
    return set(re.findall(r"^  kubectl cryo ([a-z]+)", text, re.M))


def schema_paths():
    schema = json.load(open(os.path.join(SRC, "charts/cryo/values.schema.json")))
    out = set()

    def walk(node, prefix):
        for k, v in node.get("properties", {}).items():
            p = prefix + [k]
            out.add(".".join(p))
            walk(v, p)
        if node.get("additionalProperties") not in (None, False):
            out.add(".".join(prefix) + ".*")
    walk(schema, [])
    return out


def lines_of(path):
    block, lang, pending, start = False, "", "", 0
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        s = line.strip()
        if s.startswith("```"):
            block, lang = (not block), s[3:].strip()
            continue
        if not block or lang not in ("sh", "bash", "console", "shell"):
            continue
        if not pending:
            start = n
        if s.endswith("\\"):
            pending += s[:-1] + " "
            continue
        yield start, pending + s
        pending = ""


def words(cmd):
    cmd = re.sub(r"\s+#.*$", "", cmd)  # a trailing comment
    try:
        return shlex.split(cmd)
    except ValueError:
        return cmd.split()


def mentions(text, flag):
    return re.search(re.escape(flag) + r"(?![\w-])", text) is not None


def flags(ws):
    return [w.split("=", 1)[0] for w in ws if w.startswith("--") and len(w) > 2]


def check(ws, paths):
    errs = []
    if ws[:2] == ["kubectl", "cryo"] and len(ws) > 2:
        sub = next((w for w in ws[2:] if not w.startswith("-")), None)
        if sub and sub not in commands_of("kubectl cryo"):
            errs.append("kubectl cryo has no command %r" % sub)
        for f in flags(ws[2:]):
            if not mentions(help_of("kubectl cryo"), f) and (not sub or not mentions(help_of("kubectl cryo", sub), f)):
                errs.append("kubectl cryo %s has no option %s" % (sub or "", f))
    elif ws[0] == "cryo" and len(ws) > 1:
        rest, i = ws[1:], 0
        while i < len(rest) and rest[i].startswith("-"):  # global options and their values
            i += 1 if "=" in rest[i] else 2
        sub = rest[i] if i < len(rest) else None
        if sub and sub not in commands_of("cryo"):
            errs.append("cryo has no command %r" % sub)
        for f in flags(rest):
            if not mentions(help_of("cryo"), f):
                errs.append("cryo has no option %s" % f)
    elif ws[0] in ("cryod", "cryo-cri-shim"):
        for f in flags(ws[1:]):
            if f != "--help" and not mentions(help_of(ws[0]), f):
                errs.append("%s has no option %s" % (ws[0], f))
    elif ws[0] == "helm" and len(ws) > 1 and ws[1] in ("install", "upgrade", "template"):
        for i, w in enumerate(ws):
            if w in ("--set", "--set-string") and i + 1 < len(ws):
                for kv in ws[i + 1].split(","):
                    key = re.sub(r"\[\d+\]", "", kv.split("=", 1)[0])
                    parts = key.split(".")
                    wild = any(".".join(parts[:j]) + ".*" in paths for j in range(1, len(parts)))
                    if key not in paths and not wild:
                        errs.append("the chart has no value %s" % key)
    for w in ws:
        if re.match(r"^(scripts|e2e|deploy)/[\w./-]+\.(sh|py)$", w) and not os.path.exists(os.path.join(SRC, w)):
            errs.append("no file %s" % w)
    return errs


def main():
    docs = [os.path.join(SRC, p) for p in ("README.md", "charts/cryo/README.md")]
    docs += sorted(glob.glob(os.path.join(SRC, "docs/**/*.md"), recursive=True))
    if "--only" in OPTS:
        docs = [OPTS["--only"]]
    paths = schema_paths()
    failures, checked = [], 0
    for doc in docs:
        for n, cmd in lines_of(doc):
            cmd = re.sub(r"^(\$|#)\s+", "", cmd)
            for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", cmd):
                ws = words(re.sub(r"^sudo\s+", "", part.strip()))
                ws = [w for w in ws if not re.match(r"^\w+=", w)] if ws and re.match(r"^\w+=", ws[0]) else ws
                if not ws:
                    continue
                errs = check(ws, paths)
                checked += 1
                failures += ["%s:%d: %s\n    %s" % (os.path.relpath(doc, SRC), n, e, cmd) for e in errs]
    print("checked %d commands in %d documents" % (checked, len(docs)))
    for f in failures:
        print(f)
    if "--expect" in OPTS:
        return 0 if len(failures) == int(OPTS["--expect"]) else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
