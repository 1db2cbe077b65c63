#!/usr/bin/env python3
"""The floors of the source tree: which folder may include which.

docs/architecture.md lists the folders of common/ and shim/ from the ground up, in the block between
the lines `<!-- floors -->` and `<!-- /floors -->` (one folder a line, first word). A file may include
headers of its own folder and of folders below it; an include of a folder above its own runs up, and
makes the two folders depend on each other. This prints each include that runs up, each folder missing
from the list (or listed but gone), and each cycle between folders; it exits 1 when there is any.

    tests/lint/floors.py [ROOT]        ROOT: the repository (default: this file's grandparent)
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:shim|common)/[^"]+)"')
SOURCES = ('.c', '.cpp', '.h', '.S', '.def')


def folder_of(path):
    parts = path.split('/')
    return '/'.join(parts[:2]) if len(parts) > 2 else None


def floors(root):
    text = open(os.path.join(root, 'docs/architecture.md'), encoding='utf-8').read()
    m = re.search(r'<!-- floors -->\n(.*?)<!-- /floors -->', text, re.S)
    if not m:
        sys.exit('floors: docs/architecture.md has no <!-- floors --> block')
    names = [line.split()[0] for line in m.group(1).splitlines()
             if line.strip() and not line.startswith('```') and re.match(r'\s*(shim|common)/', line)]
    return {name.rstrip('/'): rank for rank, name in enumerate(names)}


def includes(root):
    files = subprocess.run(['git', 'ls-files', 'shim', 'common'], cwd=root, capture_output=True, text=True,
                           check=True).stdout.split()
    for path in files:
        if not path.endswith(SOURCES):
            continue
        with open(os.path.join(root, path), encoding='utf-8', errors='replace') as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m:
                    yield path, number, m.group(1)


def cycles(edges):
    """Folders that reach themselves through includes (each cycle's members, once)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                out.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rank = floors(root)
    problems = []
    tracked = set()
    edges = set()
    for path, number, target in includes(root):
        here, there = folder_of(path), folder_of(target)
        tracked.add(here)
        if not here or not there or here == there:
            continue
        edges.add((here, there))
        if here in rank and there in rank and rank[there] > rank[here]:
            problems.append(f'{path}:{number}: includes {target}, a floor above {here}')
    on_disk = {folder_of(p) for p in subprocess.run(['git', 'ls-files', 'shim', 'common'], cwd=root,
                                                    capture_output=True, text=True, check=True).stdout.split()}
    on_disk.discard(None)
    for f in sorted(on_disk - set(rank)):
        problems.append(f'{f}: a folder docs/architecture.md does not place among the floors')
    for f in sorted(set(rank) - on_disk):
        problems.append(f'{f}: placed among the floors in docs/architecture.md, but not in the tree')
    for members in cycles(edges):
        problems.append('a cycle of includes between folders: ' + ' <-> '.join(members))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
