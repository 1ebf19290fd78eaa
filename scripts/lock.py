"""Write requirements/lock.txt: every package `make` installs, at one exact version.

pyproject.toml states compatible ranges (what users may combine the client with); the
lock is the one set that `make`, CI and the tests install, as pip constraints
(``pip install -c requirements/lock.txt``), so a set-up today and one next month get the
same versions. It is resolved by pip itself (``--dry-run --report``) for this Python
(the lock is for 3.11, `make`'s Python; the image's 3.12 set is requirements/image.txt)::

    .venv/bin/python scripts/lock.py            # keep the locked versions, add what is new
    .venv/bin/python scripts/lock.py --fresh    # re-resolve everything to the newest allowed
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "lock.txt"
MAKEFILE = ROOT / "Makefile"
HEADER = """\
# Exact versions of everything `make` installs (pyproject.toml's extras {extras}), for
# Python {python}: pip constraints (`pip install -c requirements/lock.txt`). Written by
# scripts/lock.py with pip's own resolver; do not edit by hand.
"""


def dev_extras() -> str:
    """The extras `make setup` installs (the Makefile's DEV_EXTRAS): the lock covers them all."""
    for line in MAKEFILE.read_text(encoding="utf-8").splitlines():
        name, _, value = line.partition(":=")
        if name.strip() == "DEV_EXTRAS":
            return value.strip()
    raise SystemExit("no DEV_EXTRAS in the Makefile")


def resolve(constraints: Path | None) -> dict[str, str]:
    """Name -> version of every package pip would install for the project and its extras."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed",
                   "--report", str(report), f"{ROOT}[{dev_extras()}]"]  # fmt: skip
        if constraints is not None:
            command[4:4] = ["-c", str(constraints)]
        subprocess.run(command, check=True)
        installs = json.loads(report.read_text(encoding="utf-8"))["install"]
    found = {
        item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"] for item in installs
    }
    found.pop("triton-tts")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fresh", action="store_true", help="ignore the current lock's versions")
    args = parser.parse_args()
    pins = resolve(None if args.fresh or not LOCK.exists() else LOCK)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    lines = [HEADER.format(extras=dev_extras(), python=python)] + [
        f"{n}=={v}\n" for n, v in sorted(pins.items())
    ]
    LOCK.write_text("".join(lines), encoding="utf-8")
    print(f"{LOCK.relative_to(ROOT)}: {len(pins)} packages for Python {python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
