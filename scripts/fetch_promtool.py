"""Put Prometheus's ``promtool`` in a folder, from a package registry only.

The chart's autoscaling rule is tested with ``promtool test rules``
(tests/test_autoscaling.py). No release download is possible here, but Debian's
``prometheus`` package carries promtool: ``apt-get download`` fetches the package into a
temporary folder and ``dpkg-deb -x`` unpacks it, without installing a Prometheus
service. Works as root (CI) and as a user with sudo for ``apt-get update``.

    python scripts/fetch_promtool.py .tools        # -> .tools/promtool
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "prometheus"


def download(folder: Path) -> Path:
    # As root, apt hands downloads to its sandbox user, who cannot write to our
    # temporary folder; it would still download, with a warning.
    sandbox = ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []
    command = ["apt-get", "download", "-qq", *sandbox, PACKAGE]
    if subprocess.run(command, cwd=folder, check=False).returncode != 0:
        # A fresh machine may have no package lists yet.
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True)
        subprocess.run(command, cwd=folder, check=True)
    return next(folder.glob(f"{PACKAGE}_*.deb"))


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".tools")
    with tempfile.TemporaryDirectory() as tmp:
        deb = download(Path(tmp))
        unpacked = Path(tmp) / "unpacked"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)  # noqa: S607 - the tool on PATH, by design
        target.mkdir(parents=True, exist_ok=True)
        promtool = target / "promtool"
        shutil.copyfile(unpacked / "usr" / "bin" / "promtool", promtool)
    promtool.chmod(0o755)
    version = subprocess.run([str(promtool), "--version"], capture_output=True, text=True, check=True)
    print(f"{promtool}: {version.stdout.splitlines()[0]}")


if __name__ == "__main__":
    main()
