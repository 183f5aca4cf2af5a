"""Make Debian's torch start torchrun: every TCPStore it makes, made without libuv.

Debian builds torch without libuv, and torch 2.6 asks TCPStore for it by default in
torchrun's rendezvous and in its workers' store client ("use_libuv was requested but
PyTorch was build without libuv support": no torchrun --rdzv-backend=c10d starts). Each
``TCPStore(...)`` call under torch/distributed that does not choose gets
``use_libuv=False``, and is byte-compiled again. Usage: pytorch-nolibuv.py TORCH_DISTRIBUTED
"""

from __future__ import annotations

import py_compile
import re
import sys
from pathlib import Path


def patch(text: str) -> tuple[str, int]:
    out, pos, count = [], 0, 0
    for m in re.finditer(r"\bTCPStore\(", text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            if depth == 0:
                break
            i += 1
        args = text[m.end():i]
        if "use_libuv" in args or not args.strip() or i < pos:
            continue
        head = args.rstrip()
        extra = " use_libuv=False," if head.endswith(",") else ", use_libuv=False"
        out.append(text[pos:m.end()] + head + extra + args[len(head):])
        pos, count = i, count + 1
    return "".join(out) + text[pos:], count


def main() -> int:
    total = 0
    for path in sorted(Path(sys.argv[1]).rglob("*.py")):
        if "testing" in path.parts or "_internal" in path.parts:
            continue
        text, count = patch(path.read_text())
        if count:
            path.write_text(text)
            py_compile.compile(str(path), doraise=True)
            print(f"pytorch-nolibuv: {path}: {count} TCPStore call(s) without libuv")
            total += count
    if total < 3:
        print("pytorch-nolibuv: torch's TCPStore calls not found: patch no longer fits",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
