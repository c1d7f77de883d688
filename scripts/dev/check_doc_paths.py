#!/usr/bin/python3
"""Every path a design document names exists in the tree.

What counts as a path: a `code span` that looks like one (it holds a '/' or ends in a source,
script or document suffix, without spaces), a Markdown link target that is not a URL, and the
first column of the layout block (the ``` block under "## Layout": unindented names are
repository paths, indented ones modules under lib/include/ampctl/ and lib/src/). A `<name>` part
stands for any one name (cmd_<name>.cpp). A path is found relative to the repository root,
lib/src/, lib/include/ampctl/, lib/include/ or the document's folder (a bare file name:
anywhere); one without a suffix may name a header/source pair (train/build). Prints each missing path as `DOC:LINE: PATH` and exits 1.

Usage: scripts/dev/check_doc_paths.py [--root DIR] [DOC ...]   (default: docs/design.md)
       scripts/dev/check_doc_paths.py --self-test
Python 3 standard library only.
"""
import argparse
import glob
import os
import re
import sys
import tempfile
import unittest

SUFFIXES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".py", ".sh", ".md", ".cmake", ".txt", ".yaml",
            ".json")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PATHLIKE = re.compile(r"^[A-Za-z0-9_.<>\-/]+$")


def candidates(doc_text):
    """(line number, path, kind) for each path the document names; kind: 'any' or 'module'."""
    out = []
    in_layout = False
    in_block = False
    seen_layout_heading = False
    for number, line in enumerate(doc_text.splitlines(), 1):
        if line.startswith("## "):
            seen_layout_heading = line.strip() == "## Layout"
        if line.startswith("```"):
            in_block = not in_block
            in_layout = in_block and seen_layout_heading
            continue
        if in_layout:
            # Column 0: a repository path; two spaces: a module; deeper: a description's next line.
            m = re.match(r"^( {0,2})(\S+)", line)
            if m and ("/" in m.group(2) or m.group(2).endswith(SUFFIXES)):
                out.append((number, m.group(2), "module" if m.group(1) else "any"))
            continue
        if in_block:
            continue
        for m in CODE_SPAN.finditer(line):
            text = m.group(1).strip()
            if text.startswith("#include"):
                continue
            if PATHLIKE.match(text) and ("/" in text or text.endswith(SUFFIXES)):
                out.append((number, text, "any"))
        for m in LINK.finditer(line):
            target = m.group(1).split("#")[0]
            if target and "://" not in target:
                out.append((number, target, "any"))
    return out


def exists(root, doc_dir, path, kind):
    pattern = re.sub(r"<[^>]*>", "*", path.rstrip("/"))
    if kind == "module":
        bases = [os.path.join(root, "lib", "include", "ampctl"), os.path.join(root, "lib", "src")]
    else:
        bases = [root, os.path.join(root, "lib", "src"), os.path.join(root, "lib", "include", "ampctl"),
                 os.path.join(root, "lib", "include"), doc_dir]
    if "/" not in pattern:  # a bare file name: anywhere in the tree
        bases.append(os.path.join(root, "**"))
    for base in bases:
        full = os.path.join(base, pattern)
        for candidate in [full] + ([] if os.path.splitext(full)[1] else [full + ".h", full + ".cpp"]):
            if glob.glob(candidate, recursive=True):
                return True
    return False


def check(root, docs):
    problems = []
    count = 0
    for doc in docs:
        path = os.path.join(root, doc)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for number, name, kind in candidates(text):
            count += 1
            if not exists(root, os.path.dirname(path), name, kind):
                problems.append(f"{doc}:{number}: {name}")
    return problems, count


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")))
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("docs", nargs="*", default=["docs/design.md"])
    args = parser.parse_args(argv)
    if args.self_test:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest)
        result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
        return 0 if result.wasSuccessful() else 1
    problems, count = check(args.root, args.docs)
    for p in problems:
        print(f"error: {p}: no such file or folder")
    if problems:
        print(f"check_doc_paths: {len(problems)} of {count} paths named do not exist")
        return 1
    print(f"check_doc_paths: ok, {count} paths named, all exist")
    return 0


class SelfTest(unittest.TestCase):
    """The checker on a small tree written here."""

    def test_finds_what_exists_and_names_what_does_not(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        for rel in ["lib/src/train/build.cpp", "lib/include/ampctl/train/build.h",
                    "lib/include/ampctl/core/tensor.h", "lib/src/core/tensor.cpp",
                    "apps/ampctl/cmd_train.cpp", "docs/reference.md", "scripts/dev/x.py"]:
            os.makedirs(os.path.dirname(os.path.join(d.name, rel)), exist_ok=True)
            open(os.path.join(d.name, rel), "w").close()
        doc = ("# t\n\n## Layout\n\n```\napps/ampctl/   cmd_<name>.cpp\n  core/  x\n"
               "  gone/  y\nold/    z\n```\n\n"
               "See `train/build`, `core/tensor.h`, `scripts/dev/x.py`, `a small table` and\n"
               "[the reference](reference.md); `backend/backend.cpp` and [x](nope.md) are gone,\n"
               "`apps/ampctl/cmd_<name>.cpp` is a pattern. `#include \"ampctl/x/y.h\"` is not.\n")
        with open(os.path.join(d.name, "docs", "design.md"), "w") as f:
            f.write(doc)
        problems, count = check(d.name, ["docs/design.md"])
        self.assertEqual(problems, ["docs/design.md:8: gone/", "docs/design.md:9: old/",
                                    "docs/design.md:13: backend/backend.cpp",
                                    "docs/design.md:13: nope.md"])
        self.assertEqual(count, 11)
        self.assertEqual(main(["--root", d.name]), 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
