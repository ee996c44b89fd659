"""The shape of the C sources: layers that only point down, files and
functions of a readable size, no PostgreSQL internals a module has no
business with.

No server is needed: the include graph comes from the sources, the call
graph from the object files the build left in src/ (make test builds
before running the tests; without objects the call check is skipped).
"""
import collections
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")

MAX_FILE_LINES = 1500
MAX_FUNCTION_LINES = 120

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    return sorted(f for f in os.listdir(SRC) if f.endswith((".c", ".h")))


def module(filename):
    """A module is a .c file with its header: buildgraph.c + buildgraph.h."""
    return os.path.splitext(filename)[0]


def read(filename):
    with open(os.path.join(SRC, filename), encoding="utf-8") as f:
        return f.read()


def include_edges():
    edges = collections.defaultdict(set)
    for f in sources():
        for inc in INCLUDE.findall(read(f)):
            if os.path.exists(os.path.join(SRC, inc)) and module(inc) != module(f):
                edges[module(f)].add((module(inc), f"#include \"{inc}\" in {f}"))
    return edges


def call_edges():
    """Module -> modules whose functions or variables it uses, from nm."""
    objs = [f for f in os.listdir(SRC)
            if f.endswith(".o") and os.path.exists(os.path.join(SRC, f[:-2] + ".c"))]
    if not objs or shutil.which("nm") is None:
        return None
    defined, used = {}, {}
    for o in objs:
        out = subprocess.run(["nm", os.path.join(SRC, o)], capture_output=True,
                             text=True, check=True).stdout
        m = module(o)
        used[m] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                defined[parts[2]] = m
            elif len(parts) == 2 and parts[0] == "U":
                used[m].add(parts[1])
    edges = collections.defaultdict(set)
    for m, syms in used.items():
        for s in syms:
            d = defined.get(s)
            if d is not None and d != m:
                edges[m].add((d, f"{m}.o uses {s}"))
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: {d for d, _ in ds} for m, ds in edges.items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

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
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def explain(edges, comps):
    lines = []
    for comp in comps:
        lines.append("circle: " + ", ".join(sorted(comp)))
        for m in sorted(comp):
            for d, why in sorted(edges.get(m, ())):
                if d in comp:
                    lines.append(f"  {m} -> {d}: {why}")
    return "\n".join(lines)


def test_layers_point_down():
    """Includes and calls together form no circle between modules."""
    edges = include_edges()
    calls = call_edges()
    if calls is not None:
        for m, ds in calls.items():
            edges[m] |= ds
    comps = cycles(edges)
    assert not comps, explain(edges, comps)


PURE_MODULES = {"buildgraph", "codebound", "format", "host", "kernels", "kernels_bit", "kernels_l1", "kernels_sparse", "layout",
                "lookahead", "simd",
                "neighbors_select", "nodecheck", "nodesource", "pqueue", "reachability",
                "search", "visited"}


def server_includes():
    pg_config = os.environ.get("PG_CONFIG") or os.path.join(ROOT, ".venv", "pginstall", "bin",
                                                             "pg_config")
    if not os.path.exists(pg_config) or shutil.which("gcc") is None:
        return None
    out = subprocess.run([pg_config, "--includedir-server"], capture_output=True, text=True)
    return out.stdout.strip() or None


def compile_header(header, server):
    """Compile a file that includes only header (after postgres.h for the
    server's side): a header includes what it uses."""
    pure = module(header) in PURE_MODULES
    text = ("" if pure else '#include "postgres.h"\n') + f'#include "{header}"\n'
    args = ["gcc", "-fsyntax-only", "-Wall", "-Werror", "-I", SRC, "-x", "c", "-"]
    if not pure:
        args[4:4] = ["-I", server]
    return subprocess.run(args, input=text, capture_output=True, text=True)


def test_headers_stand_alone():
    """Each header compiles on its own; the pure core's without any
    PostgreSQL header on the include path."""
    server = server_includes()
    if server is None:
        pytest.skip("no gcc or pg_config")
    bad = {}
    for h in sources():
        if h.endswith(".h"):
            r = compile_header(h, server)
            if r.returncode != 0:
                bad[h] = r.stderr.strip().split("\n")[0]
    assert not bad, bad


def test_pure_core_includes_no_postgres_header():
    for f in sources():
        if module(f) in PURE_MODULES and f != "host.c":
            for inc in re.findall(r'^\s*#\s*include\s+[<"]([^">]+)[">]', read(f), re.M):
                assert not inc.startswith(("postgres", "access/", "storage/", "utils/",
                                           "nodes/", "catalog/", "miscadmin")), (f, inc)


def test_no_postgres_internals():
    """The buffer manager's internals stay the buffer manager's."""
    for f in sources():
        assert "storage/buf_internals.h" not in read(f), f


def test_file_sizes():
    big = {f: n for f in sources() if f.endswith(".c")
           for n in [read(f).count("\n")] if n > MAX_FILE_LINES}
    assert not big, big


def function_lengths(text):
    """(name, lines) of each function definition in PostgreSQL style: the
    body's braces sit in column 0."""
    lines = text.split("\n")
    out, name, start = [], None, None
    for i, line in enumerate(lines):
        if line.startswith("{") and start is None:
            # the name is on the nearest line above that opens a parameter list
            for j in range(i - 1, max(i - 8, -1), -1):
                m = re.match(r"^([A-Za-z_][A-Za-z_0-9]*)\(", lines[j])
                if m:
                    name = m.group(1)
                    break
            start = i
        elif line.startswith("}") and start is not None:
            if name is not None:
                out.append((name, i - start - 1))
            name, start = None, None
    return out


def test_function_sizes():
    long = [(f, name, n) for f in sources() if f.endswith(".c")
            for name, n in function_lengths(read(f)) if n > MAX_FUNCTION_LINES]
    assert not long, long


def test_no_tracker_numbers_in_names():
    """Files and folders say what they hold, not which issue made them."""
    bad = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in ("results", "output")]
        for n in dirnames + filenames:
            if re.search(r"issue_?\d+", n, re.I):
                bad.append(os.path.relpath(os.path.join(dirpath, n), ROOT))
    assert not bad, bad


@pytest.mark.parametrize("path,limit", [("README.md", 300), ("src/README", 800)])
def test_readme_lengths(path, limit):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        n = f.read().count("\n")
    assert n <= limit, f"{path} has {n} lines"
