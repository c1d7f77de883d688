#!/usr/bin/python3
"""The dependency rule of ampctl's modules, and its check.

The rule. Dependencies point down: a module includes headers of the modules below it and never
of one above it or beside it. `core` (tensor, half, error, philox) is at the bottom; `math` (the
per-element formulas that the CPU backend and the CUDA kernels share) sits on core; `backend`
(the op table, its CPU and CUDA implementations) on math; the modules that compute with a
backend (amp, optim, nn, data, dist) on backend; `run` (the run directory's records) on core
alone and `checkpoint` on core and run (an output is checked against run's list of a run's
files); `config` (typed settings) on core alone, so no lower module sees the run's config:
each takes its own small option struct, filled by train's build layer. `train` may use all of
these, `sweep` the config, the run records and checkpoint/'s atomic and owned-output files, and the apps sit on top. `kernels/` (top level, as
users know it) may include core and math only, and only backend (its CUDA part) includes a
kernel header. Top-level headers `ampctl/<name>.h` (build_info.h, generated at configure time)
are leaves that any module may include.

    module      may include (besides itself)
    ----------  ------------------------------------------------------------------
    core        -
    math        core
    backend     core, math, kernels
    amp         core, math, backend, optim, checkpoint   (GradScaler.step drives an Optimizer;
                its state_dict is read by checkpoint/scaler_state.h, the one validator)
    optim       core, math, backend
    nn          core, math, backend
    data        core, math, backend, tokenize   (text read through a tokenizer)
    dist        core, math, backend
    checkpoint  core, run   (output_file.h checks outputs against run/layout.h's list of a
                run's files)
    run         core
    tokenize    core   (byte-level BPE tokenizers, their Unicode tables)
    config      core
    train       core, math, backend, amp, optim, nn, data, dist, checkpoint, run, config, tokenize
    sweep       core, config, run, checkpoint   (atomic files, owned output paths)
    report      core, config, run, checkpoint, sweep   (`ampctl report` and `replay --html`: a
                run's or a sweep's HTML page, the per-setting statistics)
    replay      core, math, config, run   (the scale rules of math/amp_math.h over a run's config
                and its metrics.jsonl, read by run/metrics_line.h)
    apps        core, backend, checkpoint, config, run, train, sweep, report, replay, dist,
                tokenize
    kernels     core, math

One header of a lower module is open to modules the table keeps from it (SHARED_HEADERS):
math/scale_rules.h, the table of scale rules (plain data: names, checkpoint keys, settings), to
config (scaler.policy's values and which keys apply to which rule) and checkpoint (the keys each
rule's state keeps), so that no other file spells a rule; and the small enum-and-names headers
of the lower modules' closed choices (nn/model_type.h: model.type; nn/loss_kind.h: loss;
data/kinds.h: a source's kind, task, split, vocab and token format; optim/schedule_kinds.h:
scheduler.type and anneal_strategy; dist/comm_backend.h: distributed.backend), which the config
holds as they are instead of mirroring them.

What is scanned: every `#include "ampctl/<module>/..."` (or <...>) in lib/include/ampctl/<module>/
and lib/src/<module>/ (the folder names the module), in kernels/ (module `kernels`) and in apps/
(module `apps`), and every include of a kernel header (`<name>.cuh` that exists in kernels/).
tests/ may include anything.

Model knowledge stays in nn/models/: outside its build layer (train/build.h and build.cpp, which
fill each model's option struct from the config), train/ names no model: no include of
ampctl/nn/models/, no `ModelType::<name>`, and no identifier starting with a model's class name
(Gpt..., Cnn..., Mlp...: one per header in lib/include/ampctl/nn/models/), in
code (comments and string literals aside). A model's memory estimate, for example, is its class's own
(nn::estimate_model_memory, nn/models.h), not train's.

A violation is reported as `file:line: <module> -> <module>` with
the include and the allowed set; the exit status is then 1.

Usage: scripts/dev/check_deps.py [--root DIR]   (default: the repository holding this script)
       scripts/dev/check_deps.py --self-test    (checks the checker on temporary trees)
Python 3 standard library only.
"""
import argparse
import os
import re
import sys
import tempfile
import unittest

ALLOWED = {
    "core": set(),
    "math": {"core"},
    "backend": {"core", "math", "kernels"},
    "amp": {"core", "math", "backend", "optim", "checkpoint"},
    "optim": {"core", "math", "backend"},
    "nn": {"core", "math", "backend"},
    "data": {"core", "math", "backend", "tokenize"},
    "dist": {"core", "math", "backend"},
    "checkpoint": {"core", "run"},
    "run": {"core"},
    "tokenize": {"core"},
    "config": {"core"},
    "train": {"core", "math", "backend", "amp", "optim", "nn", "data", "dist", "checkpoint",
              "run", "config", "tokenize"},
    "sweep": {"core", "config", "run", "checkpoint"},
    "report": {"core", "config", "run", "checkpoint", "sweep"},
    "replay": {"core", "math", "config", "run"},
    "apps": {"core", "backend", "checkpoint", "config", "run", "train", "sweep", "report", "replay",
             "dist", "tokenize"},
    "kernels": {"core", "math"},
}

# Headers that modules outside their module's row may include: header -> those modules.
SHARED_HEADERS = {
    "ampctl/math/scale_rules.h": {"config", "checkpoint"},
    "ampctl/nn/model_type.h": {"config"},
    "ampctl/nn/loss_kind.h": {"config"},
    "ampctl/data/kinds.h": {"config"},
    "ampctl/optim/schedule_kinds.h": {"config"},
    "ampctl/dist/comm_backend.h": {"config"},
}

# Edges that exist today in another helper's module and are being removed there (nn's Model
# becomes an interface without the optimizer and the run config). Each entry must match a real
# include: once it is gone the check fails until the entry is deleted, so the list can only
# shrink. (file relative to the root, included module)
PENDING = set()

SOURCE_EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def module_of(rel):
    """The module a file belongs to, or None when the rule does not cover it."""
    parts = rel.split("/")
    if len(parts) >= 5 and parts[:3] == ["lib", "include", "ampctl"]:
        return parts[3]
    if len(parts) >= 4 and parts[:2] == ["lib", "src"]:
        return parts[2]
    if len(parts) >= 2 and parts[0] == "kernels":
        return "kernels"
    if len(parts) >= 2 and parts[0] == "apps":
        return "apps"
    return None


def target_of(path, kernel_headers):
    """The module an include names, "" for a leaf header, None when it is not ours."""
    if path.startswith("ampctl/"):
        rest = path[len("ampctl/"):].split("/")
        return rest[0] if len(rest) > 1 else ""
    if os.path.basename(path) in kernel_headers and path.endswith(".cuh"):
        return "kernels"
    return None


# Modules that may not name a model, and the files of theirs that may (the build layer).
MODEL_FREE = {"train"}
MODEL_FREE_EXCEPT = {"lib/include/ampctl/train/build.h", "lib/src/train/build.cpp"}
STRINGS_AND_COMMENTS = re.compile(r'"(?:[^"\\]|\\.)*"|//.*$')


def model_names(root):
    """The class names of the models: one per header in lib/include/ampctl/nn/models/."""
    base = os.path.join(root, "lib/include/ampctl/nn/models")
    if not os.path.isdir(base):
        return []
    return sorted(n[:-2].capitalize() for n in os.listdir(base)
                  if n.endswith(".h"))


def names_a_model(line, models):
    """What in this line names a model (an include of nn/models/, ModelType::x, a model class),
    or None."""
    m = INCLUDE.match(line)
    if m:
        return m.group(1) if m.group(1).startswith("ampctl/nn/models/") else None
    code = STRINGS_AND_COMMENTS.sub("", line)
    m = re.search(r"\bModelType::\w+", code)
    if m:
        return m.group(0)
    if models:
        m = re.search(r"\b(?:%s)\w*" % "|".join(models), code)
        if m:
            return m.group(0)
    return None


def sources(root):
    for top in ("lib/include/ampctl", "lib/src", "kernels", "apps"):
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXTENSIONS):
                    full = os.path.join(dirpath, name)
                    yield os.path.relpath(full, root).replace(os.sep, "/")


def check(root, pending=None):
    """Returns (problems, number of includes checked). `pending`: PENDING unless given."""
    pending = PENDING if pending is None else pending
    kernels_dir = os.path.join(root, "kernels")
    kernel_headers = set()
    if os.path.isdir(kernels_dir):
        kernel_headers = {n for n in os.listdir(kernels_dir) if n.endswith(".cuh")}
    problems = []
    seen_pending = set()
    checked = 0
    models = model_names(root)
    for rel in sources(root):
        module = module_of(rel)
        if module is None:
            continue
        if module not in ALLOWED:
            problems.append(f"{rel}:1: module '{module}' is not in the table of check_deps.py "
                            "(add its row, with what it may include)")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if module in MODEL_FREE and rel not in MODEL_FREE_EXCEPT:
                    named = names_a_model(line, models)
                    if named:
                        problems.append(f"{rel}:{number}: {module} names a model ('{named}'): "
                                        "model code belongs in nn/models/ (its registry "
                                        "entries), the config's mapping in train/build.cpp")
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = target_of(m.group(1), kernel_headers)
                if target is None or target == "" or target == module:
                    continue
                checked += 1
                if target not in ALLOWED:
                    problems.append(f"{rel}:{number}: {module} -> {target}: includes "
                                    f"'{m.group(1)}' of a module that is not in the table")
                elif target not in ALLOWED[module]:
                    if module in SHARED_HEADERS.get(m.group(1), ()):
                        continue
                    if (rel, target) in pending:
                        seen_pending.add((rel, target))
                        continue
                    allowed = ", ".join(sorted(ALLOWED[module])) or "nothing"
                    problems.append(f"{rel}:{number}: {module} -> {target}: includes "
                                    f"'{m.group(1)}', but {module} may include only {allowed}")
    for rel, target in sorted(pending - seen_pending):
        if os.path.exists(os.path.join(root, "lib")):
            problems.append(f"scripts/dev/check_deps.py: PENDING entry ({rel}, {target}) matches no "
                            "include any more: delete it")
    return problems, checked


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "..", ".."))
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args(argv)
    if args.self_test:
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(SelfTest)
        result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
        return 0 if result.wasSuccessful() else 1
    root = os.path.normpath(args.root)
    problems, checked = check(root)
    for p in problems:
        print(f"error: {p}")
    if problems:
        print(f"check_deps: {len(problems)} violation(s) of the dependency rule "
              "(the table is at the top of scripts/dev/check_deps.py)")
        return 1
    print(f"check_deps: ok, {checked} includes across modules follow the rule")
    return 0


class SelfTest(unittest.TestCase):
    """The checker against small trees written here, clean and broken."""

    def tree(self, files):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        for rel, text in files.items():
            path = os.path.join(d.name, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return d.name

    def clean_files(self):
        files = {
            "lib/include/ampctl/core/tensor.h": "#pragma once\n#include <vector>\n",
            "lib/include/ampctl/math/sgd_math.h": '#include "ampctl/core/tensor.h"\n',
            "lib/include/ampctl/backend/backend.h": '#include "ampctl/math/sgd_math.h"\n',
            "lib/src/backend/cuda/optim.cpp": '#include "optim_sgd.cuh"\n',
            "kernels/optim_sgd.cuh": '#include "ampctl/math/sgd_math.h"\n',
            "lib/src/optim/sgd.cpp": '#include "ampctl/backend/backend.h"\n'
                                     '#include "ampctl/build_info.h"\n',
            "apps/ampctl/main.cpp": '#include "ampctl/train/trainer.h"\n',
        }
        for rel, target in sorted(PENDING):  # present, so the pending entries are used
            files[rel] = files.get(rel, "") + f'#include "ampctl/{target}/x.h"\n'
        return files

    def test_clean_tree_passes(self):
        problems, checked = check(self.tree(self.clean_files()))
        self.assertEqual(problems, [])
        self.assertGreaterEqual(checked, 5)

    def test_upward_include_fails_naming_file_line_and_edge(self):
        files = self.clean_files()
        files["lib/include/ampctl/backend/backend.h"] += ('\n#include "ampctl/math/nn_math.h"\n'
                                                          '#include "ampctl/optim/sgd.h"\n')
        problems, _ = check(self.tree(files))
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("lib/include/ampctl/backend/backend.h:4: "
                                               "backend -> optim:"), problems[0])
        self.assertEqual(main(["--root", self.tree(files)]), 1)

    def test_lower_module_including_config_fails(self):
        files = self.clean_files()
        files["lib/src/data/csv.cpp"] = '#include <string>\n  #  include <ampctl/config/run_config.h>\n'
        problems, _ = check(self.tree(files))
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("lib/src/data/csv.cpp:2: data -> config", problems[0])

    def test_shared_header_is_open_to_its_modules_alone(self):
        files = self.clean_files()
        files["lib/src/config/run_config.cpp"] = '#include "ampctl/math/scale_rules.h"\n'
        files["lib/src/checkpoint/scaler_state.cpp"] = ('#include "ampctl/math/scale_rules.h"\n'
                                                        '#include "ampctl/math/amp_math.h"\n')
        files["lib/src/run/summary.cpp"] = '#include "ampctl/math/scale_rules.h"\n'
        problems, _ = check(self.tree(files))
        self.assertEqual(len(problems), 2, problems)
        self.assertIn("lib/src/checkpoint/scaler_state.cpp:2: checkpoint -> math", problems[0])
        self.assertIn("lib/src/run/summary.cpp:1: run -> math", problems[1])

    def test_kernel_header_outside_backend_and_kernels_upward_fail(self):
        files = self.clean_files()
        files["lib/src/optim/adam.cpp"] = '#include "optim_sgd.cuh"\n'
        files["kernels/optim_adam.cu"] = '#include "ampctl/backend/backend.h"\n'
        problems, _ = check(self.tree(files))
        self.assertEqual(sorted(p.split(":")[0] for p in problems),
                         ["kernels/optim_adam.cu", "lib/src/optim/adam.cpp"], problems)
        self.assertTrue(any("optim -> kernels" in p for p in problems))
        self.assertTrue(any("kernels -> backend" in p for p in problems))

    def test_unknown_module_fails(self):
        files = self.clean_files()
        files["lib/src/gpt/model.cpp"] = '#include "ampctl/core/tensor.h"\n'
        files["lib/src/train/trainer.cpp"] = '#include "ampctl/vision/cnn.h"\n'
        problems, _ = check(self.tree(files))
        self.assertEqual(len(problems), 2, problems)
        self.assertTrue(any("module 'gpt' is not in the table" in p for p in problems))
        self.assertTrue(any("train -> vision" in p for p in problems))

    def test_train_naming_a_model_fails_outside_its_build_layer(self):
        files = self.clean_files()
        files["lib/include/ampctl/nn/models/gpt.h"] = '#include "ampctl/backend/backend.h"\n'
        files["lib/include/ampctl/nn/models/builtin.h"] = "#pragma once\n"
        # The build layer maps the config onto each model's options; messages and comments may
        # say a model's name.
        files["lib/src/train/build.cpp"] = ('#include "ampctl/nn/models/gpt.h"\n'
                                            "if (t == config::ModelType::gpt) o.gpt.n_layer = 1;\n")
        files["lib/src/train/sample.cpp"] = ('throw Error{"model.type: gpt, as Gpt does"};  '
                                             "// a Gpt\n")
        self.assertEqual(check(self.tree(files))[0], [])
        files["lib/src/train/memory_plan.cpp"] = ('#include "ampctl/nn/models/gpt.h"\n'
                                                  "if (c.model.type == config::ModelType::gpt)\n"
                                                  "  GptEstimate e = estimate(c);\n")
        problems, _ = check(self.tree(files))
        self.assertEqual(len(problems), 3, problems)
        for number, what in enumerate(["ampctl/nn/models/gpt.h", "ModelType::gpt",
                                       "GptEstimate"], 1):
            self.assertIn(f"lib/src/train/memory_plan.cpp:{number}: train names a model ('{what}')",
                          problems[number - 1])

    def test_stale_pending_entry_fails(self):
        files = self.clean_files()
        # An entry for an include that is not (or no longer) there.
        stale = ("lib/include/ampctl/nn/model.h", "config")
        files[stale[0]] = '#include "ampctl/backend/backend.h"\n'
        problems, _ = check(self.tree(files), pending=PENDING | {stale})
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("PENDING entry (%s, %s)" % stale, problems[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
