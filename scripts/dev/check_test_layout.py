#!/usr/bin/python3
"""The test tree's layout: tests/unit/ mirrors lib/src/ (a folder tests/unit/<module> with at
least one test source for every module lib/src/<module>), and no test file or CTest name is named
after the piece of work that added it (a "round", "hardening" or "friction" of issues) instead of
the feature it tests.

Prints each problem as one line and exits 1 when there is any.

Usage: scripts/dev/check_test_layout.py [--root DIR]
       scripts/dev/check_test_layout.py --self-test
Python 3 standard library only.
"""
import argparse
import os
import re
import sys
import tempfile
import unittest

# Words that name a round of work, not a feature. "round" alone is not one of them: rounding is
# what half the tests are about (RoundAmax, StateDictRoundTrip); a work round is spelled
# round<N> / round_<N>.
HISTORY = re.compile(r"hardening|friction|round_?\d", re.IGNORECASE)
TEST_NAME = re.compile(r"add_test\(\s*NAME\s+([^\s)]+)")


def problems(root):
    out = []
    src = os.path.join(root, "lib", "src")
    unit = os.path.join(root, "tests", "unit")
    for module in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, module)):
            continue
        folder = os.path.join(unit, module)
        sources = [f for f in os.listdir(folder) if f.endswith(".cpp")] if os.path.isdir(
            folder) else []
        if not sources:
            out.append(f"tests/unit/{module}: missing (lib/src/{module} has no unit tests)")
    for dirpath, _, files in os.walk(os.path.join(root, "tests")):
        if os.path.join("tests", "fuzz", "corpus") in dirpath:
            continue
        for f in files:
            if HISTORY.search(f):
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                out.append(f"{rel}: a file named after a round of work, not a feature")
    cmake = os.path.join(root, "tests", "CMakeLists.txt")
    with open(cmake, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            for name in TEST_NAME.findall(line):
                if HISTORY.search(name):
                    out.append(f"tests/CMakeLists.txt:{no}: test {name}: named after a round of "
                               "work, not a feature")
    return out


class SelfTest(unittest.TestCase):
    def tree(self, d, modules, unit_modules, files=(), names=()):
        for m in modules:
            os.makedirs(os.path.join(d, "lib", "src", m))
        for m in unit_modules:
            os.makedirs(os.path.join(d, "tests", "unit", m))
            open(os.path.join(d, "tests", "unit", m, f"test_{m}.cpp"), "w").close()
        os.makedirs(os.path.join(d, "tests", "cli"), exist_ok=True)
        for f in files:
            open(os.path.join(d, "tests", "cli", f), "w").close()
        with open(os.path.join(d, "tests", "CMakeLists.txt"), "w") as fh:
            for n in names:
                fh.write(f"add_test(NAME {n} COMMAND true)\n")

    def test_clean_tree(self):
        with tempfile.TemporaryDirectory() as d:
            self.tree(d, ["core", "amp"], ["core", "amp"], ["resume.py"],
                      ["cli.resume", "RoundAmax"])
            self.assertEqual(problems(d), [])

    def test_missing_module_and_history_names(self):
        with tempfile.TemporaryDirectory() as d:
            self.tree(d, ["core", "replay"], ["core"], ["hardening_round3.sh", "friction.py"],
                      ["cli.hardening3_x", "cli.friction", "cli.ok"])
            p = problems(d)
            self.assertEqual(len(p), 5, p)
            self.assertTrue(any("tests/unit/replay" in x for x in p))

    def test_an_empty_unit_folder_counts_as_missing(self):
        with tempfile.TemporaryDirectory() as d:
            self.tree(d, ["core"], [])
            os.makedirs(os.path.join(d, "tests", "unit", "core"))
            self.assertEqual(len(problems(d)), 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        sys.argv = sys.argv[:1]
        unittest.main()
    found = problems(os.path.abspath(a.root))
    for p in found:
        print(p)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
