#!/usr/bin/env python3
"""Checks that src/ is layered: every module imports only modules of its own layer or below, and no
imports run in a circle. The layers are docs/DESIGN.md's "Layers", bottom first.

An import is any `crate::...` or `super::...` path in the code (comments excluded), resolved to the
file that defines it (the crate root's re-exports to the module they come from). A directory module
(`arch/`, `capi/`, `fuzzing/`, `kernels/`, `optim/`) is one unit for the cycle check: its mod.rs and its children may
use each other. A new file must be placed in a layer here (and in DESIGN.md) before CI passes.

Usage: python3 tools/layers.py [-v]   (-v prints every module's imports)
"""

import os
import re
import sys

LAYERS = [
    ("reference numerics", ["reference/ars", "reference/bits", "reference/philox", "reference/round",
                            "reference/split", "reference/quant", "reference/norm"]),
    ("cpu", ["cpu"]),
    ("error", ["error"]),
    ("rng, storage", ["rng", "storage"]),
    ("tensors", ["tensors"]),
    ("reference optimizers", ["reference", "reference/storage", "reference/sgd", "reference/adagrad",
                              "reference/adam", "reference/lamb"]),
    ("arch", ["arch", "arch/*"]),
    ("kernels", ["kernels", "kernels/*"]),
    ("parallel", ["openmp", "team", "parallel"]),
    ("dispatch", ["dispatch"]),
    ("safe API", ["optim", "optim/*", "convert", "quant"]),
    ("C ABI, fuzzing hooks, crate root", ["capi", "capi/*", "fuzzing", "fuzzing/*", "lib"]),
]
# Directory modules whose files form one unit for the cycle check.
UNITS = ("arch", "capi", "fuzzing", "kernels", "optim")


def modules(root):
    """{module path tuple: file}, e.g. ('kernels', 'optim'): 'src/kernels/optim/mod.rs'."""
    found = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.join(d, f)
                parts = os.path.relpath(path, root)[:-3].split("/")
                if parts[-1] in ("mod", "lib"):
                    parts = parts[:-1]
                found[tuple(parts)] = path
    return found


def name(module):
    return "/".join(module) or "lib"


def main():
    verbose = "-v" in sys.argv[1:]
    files = modules("src")
    lib = open(files[()]).read()
    reexports = {}  # name -> the module path it comes from
    for m in re.finditer(r"pub use ((?:\w+::)+)(?:\{([^}]*)\}|(\w+));", lib):
        origin = m.group(1).rstrip(":").split("::")
        for item in (m.group(2) or m.group(3)).replace("\n", " ").split(","):
            if item.strip():
                reexports[item.strip()] = origin

    def resolve(path):
        if path and path[0] in reexports:
            path = reexports[path[0]] + path[1:]
        for k in range(len(path), 0, -1):
            if tuple(path[:k]) in files:
                return tuple(path[:k])
        return None

    edges = {}
    for module, path in files.items():
        src = re.sub(r"//[^\n]*", "", open(path).read())
        targets = set()
        parent = list(module[:-1])
        for prefix, base in (("crate", []), ("super", parent)):
            # `use prefix::a::{b, c::d}`: each item resolved under `a`.
            for m in re.finditer(prefix + r"::((?:\w+::)*)\{([^;]*?)\}\s*;", src, re.S):
                head = base + [s for s in m.group(1).split("::") if s]
                body = m.group(2)
                for inner in re.finditer(r"(\w+)::\{([^}]*)\}", body):
                    for item in inner.group(2).split(","):
                        targets.add(resolve(head + [inner.group(1)] + item.strip().split("::")))
                body = re.sub(r"\w+::\{[^}]*\}", "", body)
                for item in re.split(r"[,\s]+", body):
                    item = item.strip()
                    if item and item not in ("self", "*"):
                        targets.add(resolve(head + item.split("::")))
            # Any other path, taken whole: `prefix::a::b::c` or `prefix::a::*` (not `prefix::a::{`).
            for m in re.finditer(prefix + r"::((?:\w+::)*\w+)\b(?!::[\w{])", src):
                targets.add(resolve(base + m.group(1).split("::")))
        edges[module] = {t for t in targets if t is not None and t != module and t != ()}

    layer_of = {}
    for i, (_, members) in enumerate(LAYERS):
        for member in members:
            layer_of[member] = i

    def layer(module):
        n = name(module)
        if n in layer_of:
            return layer_of[n]
        return layer_of.get(module[0] + "/*") if len(module) > 1 else None

    def unit(module):
        return module[:1] if module[:1] and module[0] in UNITS else module

    problems = []
    for module in sorted(files):
        if layer(module) is None:
            problems.append(f"{files[module]}: in no layer (add it to tools/layers.py and docs/DESIGN.md)")
    for module in sorted(edges):
        if verbose:
            print(name(module), "->", ", ".join(sorted(name(t) for t in edges[module])))
        for t in sorted(edges[module]):
            lm, lt = layer(module), layer(t)
            if lm is not None and lt is not None and lt > lm:
                problems.append(f"{files[module]} ({LAYERS[lm][0]}) imports {name(t)} ({LAYERS[lt][0]}), a layer above")

    # Cycles among units (Tarjan's strongly connected components).
    graph = {}
    for module, targets in edges.items():
        graph.setdefault(unit(module), set()).update(unit(t) for t in targets if unit(t) != unit(module))
    index, low, stack, on_stack, counter = {}, {}, [], set(), [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                problems.append("import cycle: " + ", ".join(sorted(name(m) for m in component)))

    for v in sorted(graph):
        if v not in index:
            visit(v)

    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"layers: {len(files)} modules in {len(LAYERS)} layers, every import downward or within its layer, no cycle")


if __name__ == "__main__":
    main()
