"""Lists the installed packages whose version differs from a lock (constraints) file.

Usage: python .ci/drift.py .ci/constraints.txt   (run inside the virtualenv to compare)
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import distributions
from pathlib import Path


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(lock_file: str) -> int:
    locked: dict[str, str] = {}
    for line in Path(lock_file).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            locked[_name(name)] = version.strip()
    installed = {_name(d.metadata["Name"]): d.version for d in distributions()}
    drift = [
        f"  {name}: {locked.get(name, '(not locked)')} -> {version}"
        for name, version in sorted(installed.items())
        if name != "recrawler" and locked.get(name) != version
    ]
    print("\n".join(drift) if drift else "  none: the lock is the newest")
    return 1 if drift else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
