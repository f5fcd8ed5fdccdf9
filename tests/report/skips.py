#!/usr/bin/env python3
"""After `make test`: one line per ctest entry that was skipped, and why.

A skip reads as a pass in ctest's summary ("100% tests passed"), so `make test` ends with this
list. Only what the machine cannot have may skip (a package not installed, no root); a service
that is installed and does not start fails its tests instead. Reads ctest's JUnit output
(`ctest --output-junit`): each skipped entry's own output says why (a GTEST_SKIP message, or the
line a test that exits 77 prints).
"""
import sys
import xml.etree.ElementTree as ET


def reason(output: str) -> str:
    lines = [l.strip() for l in output.splitlines() if l.strip()]
    # GoogleTest: "file.cc:34: Skipped" and the message on the lines after it.
    for i, l in enumerate(lines):
        if l.endswith(": Skipped") and i + 1 < len(lines) and not lines[i + 1].startswith("["):
            return lines[i + 1]
    # A test that exits 77 says why in a line of its own ("SKIP: ...", "...: skipped: ...").
    for l in lines:
        if l.startswith("SKIP") or "skipped:" in l.lower():
            return l
    return lines[-1] if lines else "(it printed nothing)"


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: skips.py JUNIT_XML", file=sys.stderr)
        return 2
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"skips.py: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
        return 2
    skipped = []
    for case in root.iter("testcase"):
        if case.find("skipped") is None:
            continue
        out = case.find("system-out")
        skipped.append((case.get("name", "?"), reason(out.text or "" if out is not None else "")))
    if not skipped:
        print("skipped: none")
        return 0
    print(f"skipped: {len(skipped)} (what this machine lacks; each says why)")
    for name, why in sorted(skipped):
        print(f"  {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
