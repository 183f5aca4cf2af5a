#!/usr/bin/env python3
"""The slowest test modules of a pytest junit xml file (each module's tests' setup, call and
teardown summed), so that CI's log says where the cluster tier's time goes, module by module.

    python3 .ci/module-times.py build/junit/cluster.xml [N]
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path


def module_times(path: Path) -> tuple[dict[str, float], Counter[str]]:
    """Seconds and test count per module (a test's classname: tests.integration.test_x)."""
    seconds: dict[str, float] = defaultdict(float)
    tests: Counter[str] = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        module = (case.get("classname") or "?").rsplit(".", 1)[-1]
        seconds[module] += float(case.get("time") or 0)
        tests[module] += 1
    return seconds, tests


def main(argv: list[str]) -> int:
    if not argv or not Path(argv[0]).is_file():
        print(f"module-times: no junit file {argv[0] if argv else ''}: nothing to show")
        return 0
    top = int(argv[1]) if len(argv) > 1 else 15
    seconds, tests = module_times(Path(argv[0]))
    print(f"module-times: {sum(seconds.values()):.0f} s in {sum(tests.values())} tests "
          f"({argv[0]}), slowest modules:")
    for module, secs in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{secs:8.1f} s {tests[module]:4d} tests  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
