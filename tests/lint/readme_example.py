#!/usr/bin/env python3
"""The README's first C++ block is examples/readme.cu's code between `// README begin` and
`// README end` markers (after the file's tessel includes; a last begin runs to the file's end), so
the example users copy is the one ctest examples.readme compiles, runs and checks.

Usage: readme_example.py SOURCE_DIR    (exit 1 with a diff when they differ)"""
import difflib
import re
import sys
from pathlib import Path


def readme_block(text):
    m = re.search(r"```cpp\n(.*?)```", text, re.S)
    return m.group(1).splitlines() if m else []


def example_block(text):
    lines = text.splitlines()
    out = [l for l in lines if l.startswith("#include <tessel/")] + [""]
    inside = False
    for line in lines:
        if line.strip() == "// README begin":
            inside = True
        elif line.strip() == "// README end":
            inside = False
        elif inside:
            out.append(line)
    return out


def main():
    root = Path(sys.argv[1])
    want = example_block((root / "examples/readme.cu").read_text())
    have = readme_block((root / "README.md").read_text())
    if want == have:
        print(f"README's example matches examples/readme.cu ({len(want)} lines)")
        return 0
    print("README.md's first ```cpp block differs from examples/readme.cu's README part:")
    sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(have, want, "README.md", "examples/readme.cu", lineterm=""))
    return 1


if __name__ == "__main__":
    sys.exit(main())
