#!/usr/bin/python3
"""docs/design.md's interface block (the cpp block after "one interface, `canopy::Design`") quotes
backends/canopy_Design.hpp: each of its lines occurs in the header, spaces aside."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def squeeze(text):
    return " ".join(text.split())


def main():
    with open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8") as f:
        doc = f.read()
    m = re.search(r"one interface, `canopy::Design`.*?```cpp\n(.*?)```", doc, re.S)
    if not m:
        print("docs/design.md: no interface block after \"one interface, `canopy::Design`\"")
        return 1
    with open(os.path.join(ROOT, "backends", "canopy_Design.hpp"), encoding="utf-8") as f:
        header = squeeze(f.read())
    lines = [squeeze(l) for l in m.group(1).splitlines() if l.strip()]
    stale = [l for l in lines if l not in header]
    for l in stale:
        print(f"docs/design.md: `{l}` is not in backends/canopy_Design.hpp")
    print(f"design interface: {len(lines)} lines quoted, {len(stale)} stale")
    return 1 if stale or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
