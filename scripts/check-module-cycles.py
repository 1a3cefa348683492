#!/usr/bin/env python3
"""No import circles inside a crate: among the modules of each folder (files
and subfolders side by side), a module that uses a sibling is not used by it,
directly or round about. A use of `crate::a::b::C` from inside module `x`
counts as an edge from `x` to `a`, from `x`'s ancestors' children to theirs,
at the level where the two paths part.

    python3 scripts/check-module-cycles.py        # fails naming each circle
    python3 scripts/check-module-cycles.py --edges
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# `crate::a::b`, `super::a`, `self::a` paths, and the braces of `use` trees.
PATH = re.compile(r'\b(crate|super|self)((?:::\w+)+)')
USE_TREE = re.compile(r'\buse\s+(crate|super|self)((?:::\w+)*)::\{([^;]*)\}', re.S)


def module_of(src, path):
    """The module path of a file: src/a/b.rs and src/a/b/mod.rs are a::b."""
    parts = list(path.relative_to(src).with_suffix('').parts)
    if parts[-1] in ('mod', 'lib', 'main'):
        parts = parts[:-1]
    if parts[:1] == ['bin']:
        return None  # binaries are crates of their own
    return parts


def strip(text):
    """The code without comments and string literals."""
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return '\n'.join(l.split('//')[0] for l in text.split('\n'))


def test_free(text):
    """The text without `#[cfg(test)] mod x { ... }` blocks."""
    out, i = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {'{': 1, '}': -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return ''.join(out)


def targets(here, text):
    """Absolute module paths this file refers to."""
    found = []

    def resolve(root, rest):
        segs = [s for s in rest.split('::') if s]
        if root == 'crate':
            base = []
        elif root == 'self':
            base = list(here)
        else:
            base = list(here[:-1])
            while segs and segs[0] == 'super':
                segs.pop(0)
                base = base[:-1]
        return base + segs

    for m in USE_TREE.finditer(text):
        prefix = resolve(m.group(1), m.group(2))
        for item in re.split(r'[,{}]', m.group(3)):
            item = item.strip().split(' as ')[0].strip()
            if item and item not in ('self', '*'):
                found.append(prefix + item.split('::'))
            elif item == 'self':
                found.append(prefix)
    for m in PATH.finditer(text):
        found.append(resolve(m.group(1), m.group(2)))
    return found


def crate_edges(src):
    """{parent: {child: {child}}}: at each folder, which sibling uses which."""
    mods = {}
    for p in sorted(src.rglob('*.rs')):
        m = module_of(src, p)
        if m is not None:
            mods[tuple(m)] = p
    known = set(mods)
    edges = {}
    for here, p in mods.items():
        text = test_free(strip(p.read_text()))
        for t in targets(list(here), text):
            # The longest known module the path names.
            t = tuple(t)
            while t and t not in known:
                t = t[:-1]
            k = 0
            while k < min(len(here), len(t)) and here[k] == t[k]:
                k += 1
            if k < len(here) and k < len(t):
                parent = here[:k]
                a, b = here[k], t[k]
                edges.setdefault(parent, {}).setdefault(a, set()).add(b)
    return edges


def cycles(graph):
    """Strongly connected groups of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    show = '--edges' in sys.argv
    bad = 0
    for src in sorted(ROOT.glob('*/src')):
        crate = src.parent.name
        for parent, graph in sorted(crate_edges(src).items()):
            where = crate + '::' + '::'.join(parent) if parent else crate
            if show:
                for a in sorted(graph):
                    print(f'{where}: {a} -> {", ".join(sorted(graph[a]))}')
            for group in cycles(graph):
                bad += 1
                print(f'{where}: a circle among {", ".join(group)}')
    if bad:
        return 1
    if not show:
        print('src: no import circles among the modules of any folder')
    return 0


if __name__ == '__main__':
    sys.exit(main())
