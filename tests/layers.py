"""The dependency rule of docs/design.md, checked on the sources.

Reads the level column of the Layers table in docs/design.md and every
`#include "..."` under a source tree; reports an include into a folder of the
same or a higher level (subfolders count as their top folder), a folder the
table does not list, and any circle of includes between files of different
folders (a file is its .c and .h together). Exit 1 on any of them.

usage: python3 tests/layers.py [SRC_DIR [DESIGN_MD]]
"""
import os
import re
import sys


def read_levels(design):
    text = open(design, encoding="utf-8").read()
    sec = text[text.index("## Layers"):]
    sec = sec[:sec.index("\n## ", 1)]
    levels = {}
    for m in re.finditer(r"^\|\s*(\d+)\s*\|\s*`src/([a-z0-9_]+)/`", sec, re.M):
        levels[m.group(2)] = int(m.group(1))
    if not levels:
        sys.exit(f"layers: no level rows in the Layers table of {design}")
    return levels


def sources(src):
    for root, _, files in os.walk(src):
        for f in files:
            if f.endswith((".c", ".h", ".cu")):
                yield os.path.relpath(os.path.join(root, f), src)


def module(path):
    return os.path.splitext(path)[0]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    design = sys.argv[2] if len(sys.argv) > 2 else "docs/design.md"
    levels = read_levels(design)
    problems = []
    edges = {}
    n_includes = 0
    for f in sorted(sources(src)):
        top = f.split("/")[0]
        if top not in levels:
            problems.append(f"{f}: folder src/{top}/ is not in the Layers table of {design}")
            continue
        for ln, line in enumerate(open(os.path.join(src, f), encoding="utf-8", errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            inc = m.group(1)
            if os.path.exists(os.path.join(src, inc)):
                target = inc
            elif os.path.exists(os.path.join(src, os.path.dirname(f), inc)):
                target = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            else:
                continue  # outside src (a library's header)
            n_includes += 1
            ttop = target.split("/")[0]
            if ttop != top:
                if ttop not in levels:
                    problems.append(f"{f}:{ln}: includes {inc}, whose folder is not in the Layers table")
                elif levels[ttop] >= levels[top]:
                    how = "the same level as" if levels[ttop] == levels[top] else "a higher level than"
                    problems.append(f"{f}:{ln}: includes {inc}: src/{ttop}/ (level {levels[ttop]}) is at {how} "
                                    f"src/{top}/ (level {levels[top]})")
            a, b = module(f), module(target)
            if a != b:
                edges.setdefault(a, set()).add(b)
    # circles: strongly connected components of the module graph (Tarjan, iterative)
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    nodes = set(edges) | {b for bs in edges.values() for b in bs}
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))
    in_folder = 0
    for comp in sccs:
        if len({os.path.dirname(c) for c in comp}) > 1:
            problems.append("circle between folders: " + " <-> ".join(comp))
        else:
            in_folder += 1
            print("layers: (allowed) circle inside src/" + os.path.dirname(comp[0]) + "/: " + " <-> ".join(comp))
    for p in problems:
        print("layers:", p)
    print(f"layers: {n_includes} includes in {len(nodes)} files over {len(levels)} folders; "
          f"{len(problems)} problems; {in_folder} circles inside a folder")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
