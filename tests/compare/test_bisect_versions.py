"""`bisect --versions` against a local wheelhouse of a tiny fake package (no index needed)."""

from __future__ import annotations

import base64
import hashlib
import zipfile

import pytest

from stackcost.cli import main


def write_wheel(wheels, version: str, cost: float) -> None:
    """slowpkg==`version` as a pure-Python wheel, written directly: a zip of the package,
    its metadata and the RECORD of both (a build backend per version took seconds)."""
    info = f"slowpkg-{version}.dist-info"
    files = {
        "slowpkg/__init__.py": f"COST = {cost}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: slowpkg\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheels.mkdir(exist_ok=True)
    with zipfile.ZipFile(wheels / f"slowpkg-{version}-py3-none-any.whl", "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)


@pytest.fixture
def wheelhouse(tmp_path):
    wheels = tmp_path / "wheels"
    for v, cost in (("1.0", 0.0), ("2.0", 1.0), ("3.0", 1.0)):
        write_wheel(wheels, v, cost)
    return wheels


def test_versions_bisect_finds_the_first_slow_version(wheelhouse, capsys):
    cmd = "python -c \"import slowpkg; print('value=%s' % slowpkg.COST)\""
    argv = ["bisect", "--versions", "slowpkg==1.0,slowpkg==2.0,slowpkg==3.0", "--command", cmd]
    argv += ["--pip-arg=--no-index", f"--pip-arg=--find-links={wheelhouse}"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "first bad: slowpkg==2.0" in out
