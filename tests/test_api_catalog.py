"""The API behind `list`, `peaks` and `build`: what can run here, the machine's peaks, the
native programs. The commands' output is tested with the commands (test_cli.py ...)."""

from __future__ import annotations

import contextlib

import pytest

from stackcost.api import catalog, machine
from stackcost.api.build import build_native
from stackcost.errors import SpecError


def test_backends_are_the_registry_in_ladder_order_with_their_options():
    found = catalog.backends()
    assert [b.name for b in found] == catalog.backend_names()
    assert found[0].name == catalog.BASELINE == "eager" and found[0].available
    torchscript = catalog.backend("torchscript")
    variant = next(o for o in torchscript.options if o.key == "variant")
    assert variant.values[0] == variant.default and set(variant.values) == set(variant.choices)
    assert torchscript.import_path == "stackcost.backends.torchscript:TorchScriptBackend"
    assert "generate" not in torchscript.modes and not torchscript.generates


def test_a_bad_backend_name_is_refused():
    with pytest.raises(SpecError, match="unknown backend 'eagr'"):
        catalog.check_backend("eagr")
    with pytest.raises(SpecError, match="unknown backend"):
        catalog.backend("eagr")


def test_models_and_their_size_axes():
    names = [w.name for w in catalog.models()]
    assert "resnet18" in names and "bert-base" in names
    assert "seq_len" in catalog.SIZE_AXES and "torch-default" in catalog.init_schemes()


def test_build_refuses_a_backend_with_nothing_to_build_before_building(tmp_path):
    cache = tmp_path / "native"
    with pytest.raises(SpecError, match="eager has nothing to build"):
        build_native(["libtorch", "eager"], cache)
    with pytest.raises(SpecError, match="unknown backend 'nope'"):
        build_native(["nope"], cache)
    assert not cache.exists()  # nothing compiled


def test_cpu_peaks_refuse_bad_thread_counts_before_measuring(tmp_path):
    with pytest.raises(SpecError, match="threads 4096 is more than"):
        machine.cpu_peaks([4096], cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_cpu_peaks_measure_once_then_read_the_cache(tmp_path, monkeypatch):
    from stackcost.measure import peaks as peaks_mod

    real = peaks_mod.measure_peaks
    messages: list[str] = []

    def quiet(threads: int, quick: bool = False):  # a quiet machine, at the quick sizes
        return real(threads, quick=True).model_copy(update={"other_busy_cores": 0.0})

    def measuring(message: str):
        messages.append(message)
        return contextlib.nullcontext()

    monkeypatch.setattr(peaks_mod, "measure_peaks", quiet)
    first = machine.cpu_peaks([1], quick=True, cache_dir=tmp_path, measuring=measuring)
    assert [r.source for r in first.readings] == ["measured"]
    assert messages == ["measuring peaks at 1 thread(s)…"]
    again = machine.cpu_peaks([1], quick=True, cache_dir=tmp_path, measuring=measuring)
    assert [r.source for r in again.readings] == ["cache"] and len(messages) == 1
    assert again.readings[0].peaks == first.readings[0].peaks
    assert again.environment == first.environment
