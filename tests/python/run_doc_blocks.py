"""Runs the ```python blocks of a Markdown page (docs/python.md) in order, as
one script: one namespace, in a temporary folder holding a link to every
top-level entry of the repository (inputs are named from its root, files
the blocks write land in the folder). A block that raises fails the run,
naming the block and its line in the page.

usage: run_doc_blocks.py PAGE.md   (the repository root: PIPEGRID_ROOT, or
the page's folder's parent)
"""

import os
import sys
import tempfile
import traceback


def python_blocks(path):
    """(line of the opening fence, code) of each ```python block, in order."""
    blocks, code, start = [], None, 0
    with open(path, encoding="utf-8") as page:
        for number, line in enumerate(page, start=1):
            stripped = line.strip()
            if code is None and stripped == "```python":
                code, start = [], number
            elif code is not None and stripped == "```":
                blocks.append((start, "".join(code)))
                code = None
            elif code is not None:
                code.append(line)
    if code is not None:
        raise SystemExit(f"{path}:{start}: a ```python block is never closed")
    return blocks


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: run_doc_blocks.py PAGE.md")
    page = os.path.abspath(sys.argv[1])
    root = os.environ.get("PIPEGRID_ROOT") or os.path.dirname(os.path.dirname(page))
    blocks = python_blocks(page)
    if not blocks:
        raise SystemExit(f"{page}: no ```python block")
    with tempfile.TemporaryDirectory(prefix="pipegrid-doc-") as folder:
        for entry in os.listdir(root):
            if entry in ("build", ".git") or entry.startswith("build-"):
                continue
            os.symlink(os.path.join(root, entry), os.path.join(folder, entry))
        os.chdir(folder)
        namespace = {"__name__": "__main__"}
        for start, code in blocks:
            where = f"{os.path.relpath(page, root)}, the block at line {start}"
            try:
                exec(compile(code, where, "exec"), namespace)
            except Exception:
                traceback.print_exc()
                print(f"run_doc_blocks.py: {where} failed", file=sys.stderr)
                return 1
    print(f"run_doc_blocks.py: {len(blocks)} blocks of {os.path.relpath(page, root)} ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
