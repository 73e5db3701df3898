#!/usr/bin/env python3
# The driver's import graph (`use crate::...` between its files, kext/ and proto/ as leaves),
# and a check that it has no circle (Documentation/design.md draws it). A child module's use of
# its parent (`super::`, the qp engines using QpInner) is the module's own structure and not
# counted. Run by scripts/lint.sh.
#   import-graph.py [--check] [RXE_RS_DIR]
import glob
import os
import re
import sys

LEAVES = {"kext", "proto", "uapi"}


def module_name(root, path):
    rel = os.path.relpath(path, root)[: -len(".rs")]
    if rel.endswith("/mod"):
        rel = rel[: -len("/mod")]
    return rel.replace("/", "::")


def split_top_level(body):
    """The comma-separated items of a `use` group, nested groups kept whole."""
    depth, current, items = 0, "", []
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def use_group_paths(prefix, body):
    """Every path a `use crate::{...}` group names, nested groups expanded."""
    for item in split_top_level(body):
        if "::{" in item:
            head = item.split("::{", 1)[0]
            inner = item[item.index("::{") + 3 : -1]
            yield from use_group_paths(prefix + head + "::", inner)
        else:
            yield prefix + item.split(" ")[0]


def references(me, source):
    """The crate paths a file's code (tests left out) refers to."""
    source = re.sub(r"#\[cfg\(test\)\][\s\S]*", "", source)
    refs = set()
    for m in re.finditer(r"use crate::\{([\s\S]*?)\};", source):
        refs.update(use_group_paths("", m.group(1)))
    refs.update(m.group(1) for m in re.finditer(r"crate::([a-z_:]+)", source))
    parent = me.rsplit("::", 1)[0] if "::" in me else ""
    for m in re.finditer(r"\bsuper::([a-z_:]+)", source):
        refs.add((parent + "::" if parent else "") + m.group(1))
    for m in re.finditer(r"^use ([a-z_]+)::", source, re.M):
        refs.add(me + "::" + m.group(1))
    return refs


def import_graph(root):
    files = [
        f
        for f in glob.glob(root + "/**/*.rs", recursive=True)
        if "/proto/" not in f and "/kext/" not in f
    ]
    names = {module_name(root, f) for f in files} | LEAVES

    def resolve(path):
        """The longest known module that is a prefix of the path."""
        parts = path.split("::")
        for n in range(len(parts), 0, -1):
            candidate = "::".join(parts[:n])
            if candidate in names:
                return candidate
        return None

    edges = {}
    for f in files:
        me = module_name(root, f)
        with open(f) as src:
            refs = references(me, src.read())
        targets = set()
        for ref in refs:
            target = resolve(ref.rstrip(":"))
            if target and target != me and not me.startswith(target + "::"):
                targets.add(target)
        edges[me] = sorted(targets)
    return edges


def circles(edges):
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, []):
            if w not in edges:
                continue
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
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return found


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    check = "--check" in sys.argv
    here = os.path.dirname(os.path.abspath(__file__))
    root = args[0] if args else os.path.join(here, "..", "..", "rxe_rs")
    edges = import_graph(root)
    for k in sorted(edges):
        print(f"{k:22} -> {' '.join(edges[k])}")
    found = circles(edges)
    print("circles:", found or "none")
    if check and found:
        print("import-graph: a new import circle:", found, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
