#!/usr/bin/env python3
"""Every function in the crates' src/ fits on a screen: at most LIMIT lines
(100), test modules aside. A table (one entry per line) may be longer; those
are named below with the reason.

    python3 scripts/check-fn-length.py          # fails listing the long ones
    python3 scripts/check-fn-length.py --all 60 # lists every function over 60
"""
import pathlib
import re
import sys

LIMIT = 100
# (file, function): why it may be longer.
TABLES = {
    ("mlx5/src/hw/ffi.rs", "all_constants"): "one line per rdma-core constant, for the ABI test",
}

FN = re.compile(
    r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)'
)
TEST_MOD = re.compile(r'^\s*mod\s+\w+\s*\{')


def code(line):
    """The line without string and char literals and comments."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split('//')[0]


def extent(lines, i):
    """The index of the line closing the item opened at line i, or None for
    a declaration without a body."""
    depth, started = 0, False
    for j in range(i, len(lines)):
        c = code(lines[j])
        if not started and c.rstrip().endswith(';') and '{' not in c:
            return None
        for ch in c:
            if ch == '{':
                depth += 1
                started = True
            elif ch == '}':
                depth -= 1
        if started and depth == 0:
            return j
    return None


def long_functions(path, limit):
    lines = path.read_text().split('\n')
    i = 0
    while i < len(lines):
        if lines[i].strip() == '#[cfg(test)]' and i + 1 < len(lines) and TEST_MOD.match(lines[i + 1]):
            end = extent(lines, i + 1)
            i = (end if end is not None else i) + 1
            continue
        m = FN.match(lines[i])
        if m:
            end = extent(lines, i)
            if end is not None and end - i + 1 > limit:
                yield end - i + 1, i + 1, m.group(7)
        i += 1


def main():
    args = sys.argv[1:]
    show_all = '--all' in args
    nums = [a for a in args if a.isdigit()]
    limit = int(nums[0]) if nums else LIMIT
    root = pathlib.Path(__file__).resolve().parent.parent
    found = []
    for p in sorted(root.glob('*/src/**/*.rs')):
        rel = p.relative_to(root).as_posix()
        if rel.startswith('target/'):
            continue
        for n, line, name in long_functions(p, limit):
            if show_all or (rel, name) not in TABLES:
                found.append((n, f'{rel}:{line}', name))
    for n, at, name in sorted(found, reverse=True):
        print(f'{n:5} {at} {name}')
    if show_all:
        return 0
    if found:
        print(f'functions over {limit} lines: split them into steps named for what they do')
        return 1
    print(f'src: every function fits in {limit} lines (tables aside: {len(TABLES)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
