#!/usr/bin/env python3
"""Docs that stay true: every relative link in README.md, the crates'
READMEs and docs/*.md names a file or directory that exists, and every
source file a doc names in backticks (`worker.rs`, `transport/dc.rs`,
`mlx5/src/sim/engine/streams.rs`) is a file of the repository.

    python3 scripts/check-doc-links.py      # from anywhere; exit 1 on a dead name
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
SOURCE = re.compile(r"`([A-Za-z0-9_./-]+\.(?:rs|sh|c|toml|yml|py))`")


def tracked_files():
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [p for p in out.splitlines() if p]


def docs():
    found = [ROOT / "README.md"]
    found += sorted(ROOT.glob("*/README.md"))
    found += sorted((ROOT / "docs").glob("*.md"))
    return [p for p in found if p.is_file()]


def main():
    files = tracked_files()
    dead = []
    for doc in docs():
        text = doc.read_text(encoding="utf-8")
        rel = doc.relative_to(ROOT)
        for n, line in enumerate(text.splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue
                path = target.split("#", 1)[0]
                if path and not (doc.parent / path).exists():
                    dead.append(f"{rel}:{n}: link to {target}")
            for name in SOURCE.findall(line):
                if "*" in name or name.startswith((".", "/")):
                    continue
                if not any(f == name or f.endswith("/" + name) for f in files):
                    dead.append(f"{rel}:{n}: names {name}, which no file is")
    for d in dead:
        print(d)
    if dead:
        print(f"{len(dead)} dead name(s) in the docs", file=sys.stderr)
        return 1
    print(f"docs: every link and source file named exists ({len(docs())} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
