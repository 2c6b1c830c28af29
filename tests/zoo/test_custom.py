from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from stackcost.cell import ModelRef
from stackcost.zoo import ZooError, build_custom, build_model, check_resolution, load_factory

MODULE = textwrap.dedent(
    """
    import torch
    from torch import nn

    def good():
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten())

    def not_a_module():
        return 42

    def broken():
        raise RuntimeError("no weights here")

    class Holder:
        @staticmethod
        def make():
            return nn.Linear(4, 2)

    CONSTANT = 3
    """
)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding `usermodels.py`, with sys.path and modules restored after."""
    (tmp_path / "usermodels.py").write_text(MODULE)
    (tmp_path / "brokenmod.py").write_text(
        "raise ImportError('missing dependency\\nsecond line')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("usermodels", "brokenmod"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def test_good_factory_from_working_directory(workdir: Path) -> None:
    model = build_custom("usermodels:good")
    assert isinstance(model, torch.nn.Sequential)
    assert isinstance(build_custom("usermodels:Holder.make"), torch.nn.Linear)
    assert callable(load_factory("usermodels:good"))


def test_build_model_seeds_and_inits_custom(workdir: Path) -> None:
    a = build_model(ModelRef(name="usermodels:good", init="kaiming-normal", seed=3), {})
    b = build_model(ModelRef(name="usermodels:good", init="kaiming-normal", seed=3), {})
    assert not a.training
    assert torch.equal(a[0].weight, b[0].weight)
    assert torch.all(a[0].bias == 0)
    assert check_resolution("usermodels:good", 1) is None


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz'"),
        ("brokenmod:make", r"cannot import 'brokenmod' \(ImportError: missing dependency\)"),
        ("usermodels:missing", "has no attribute 'missing'"),
        ("usermodels:CONSTANT", r"is neither callable nor a stackcost Workload \(got int\)"),
        ("usermodels", "not of the form"),
        ("usermodels:", "not of the form"),
        (":good", "not of the form"),
    ],
)
def test_load_factory_errors(workdir: Path, path: str, match: str) -> None:
    with pytest.raises(ZooError, match=match) as info:
        load_factory(path)
    message = str(info.value)
    assert "\n" not in message
    assert repr(path) in message


def test_factory_must_return_a_module(workdir: Path) -> None:
    with pytest.raises(ZooError, match=r"returned int, not a torch.nn.Module"):
        build_custom("usermodels:not_a_module")


def test_factory_exception_is_wrapped(workdir: Path) -> None:
    with pytest.raises(ZooError, match="raised RuntimeError: no weights here") as info:
        build_custom("usermodels:broken")
    assert isinstance(info.value.__cause__, RuntimeError)


def test_zoo_error_is_a_value_error() -> None:
    assert issubclass(ZooError, ValueError)
