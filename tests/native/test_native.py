"""The LibTorch rungs: build cache, the C++ reader/writer, and equivalence with eager."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable

import pytest
import torch

from stackcost import zoo
from stackcost.backends import PrepareContext, load_backend
from stackcost.cell import Cell, ModelRef
from stackcost.execute.worker import run_task
from stackcost.native.build import BuildError, ensure_built, toolchain_problem
from stackcost.native.tensors import write_tensors
from stackcost.result import MEASURED_STATUSES, RepetitionResult
from stackcost.scenarios.task import RepetitionTask
from tests.native.conftest import MODELS, QUICK, example


def without(tool: str):
    """A `which` that finds everything shutil.which finds, except `tool`."""
    return lambda name: None if name == tool else shutil.which(name)


def test_unavailable_names_the_fix():
    assert toolchain_problem("libtorch", without("cmake")) == (
        "cmake not found: apt-get install cmake g++"
    )
    assert "g++ not found" in toolchain_problem("libtorch", without("g++"))
    with pytest.raises(BuildError, match="apt-get install cmake g\\+\\+"):
        ensure_built("libtorch", None, without("cmake"))


@pytest.mark.slow
def test_build_cache_reuses_the_build(native_build):
    again = ensure_built("libtorch", native_build.executable.parent.parent)
    assert not again.compiled
    assert again.executable == native_build.executable
    assert again.key == native_build.key
    assert again.seconds < 5  # a hash and a stat, not a compile


@pytest.mark.slow
def test_cpp_echo_is_bit_exact(native_build, tmp_path):
    g = torch.Generator().manual_seed(3)
    write_tensors(
        tmp_path / "in.scw", {"a.b": torch.randn(2, 3, 4, generator=g), "s": torch.ones(())}
    )
    subprocess.run(
        [str(native_build.executable), "echo", tmp_path / "in.scw", tmp_path / "out.scw"],
        check=True,
    )
    assert (tmp_path / "out.scw").read_bytes() == (tmp_path / "in.scw").read_bytes()


@pytest.mark.slow
def test_cpp_echo_keeps_dtypes(native_build, tmp_path):
    ids = {"ids": torch.tensor([[3, 2**40]]), "mask": torch.tensor([True, False])}
    write_tensors(tmp_path / "in.scw", ids, keep_dtype=True)
    subprocess.run(
        [str(native_build.executable), "echo", tmp_path / "in.scw", tmp_path / "out.scw"],
        check=True,
    )
    assert (tmp_path / "out.scw").read_bytes() == (tmp_path / "in.scw").read_bytes()


@pytest.mark.slow
def test_cpp_rejects_a_truncated_file(native_build, tmp_path):
    write_tensors(tmp_path / "in.scw", {"x": torch.ones(8)})
    (tmp_path / "cut.scw").write_bytes((tmp_path / "in.scw").read_bytes()[:-4])
    out = subprocess.run(
        [str(native_build.executable), "echo", tmp_path / "cut.scw", tmp_path / "out.scw"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "truncated" in out.stderr


def task(tmp_path, backend: str, model: str, batch: int = 2) -> RepetitionTask:
    ref, resolution = MODELS[model]
    cell = Cell(model=ref, backend=backend, batch_size=batch, resolution=resolution, threads=2)
    return RepetitionTask(cell=cell, protocol=QUICK, workdir=str(tmp_path))


@pytest.fixture(scope="module")
def runs(native_build, tmp_path_factory) -> Callable[..., RepetitionResult]:
    """run_task's result for (backend, model, backend options), each run once in the module:
    the default torchscript-cpp resnet18 cell is both an agreement case and the default of
    the graph options."""
    done: dict[tuple, RepetitionResult] = {}

    def run(backend: str, model: str, options: dict[str, str] | None = None):
        key = (backend, model, tuple(sorted((options or {}).items())))
        if key not in done:
            t = task(tmp_path_factory.mktemp(backend), backend, model)
            t = t.model_copy(
                update={"cell": t.cell.model_copy(update={"backend_options": options or {}})}
            )
            done[key] = run_task(t)
        return done[key]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("backend", ["libtorch", "torchscript-cpp"])
def test_matches_eager(runs, backend, model):
    result = runs(backend, model)
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    assert result.verification.ok and result.verification.max_rel_err <= 1e-4
    assert result.stats.n >= QUICK.min_iters and len(result.samples_ns) == result.stats.n
    assert result.cold_start_ms > 0 and result.throughput > 0
    assert result.memory.peak_rss_bytes >= result.memory.baseline_rss_bytes > 0
    assert result.details["torch_threads"] == 2
    assert result.details["libtorch"] == torch.__version__.split("+")[0]
    assert result.details["build_compiled"] is False  # the session's build, reused


@pytest.mark.slow
@pytest.mark.parametrize(
    "options, optimized",
    [({}, True), ({"optimize": "false"}, False), ({"freeze": "false"}, False)],
)
def test_torchscript_cpp_graph_options(runs, options, optimized):
    # The Python rung's defaults: frozen and optimize_for_inference, applied by the program.
    result = runs("torchscript-cpp", "resnet18", options)
    assert result.status in MEASURED_STATUSES, (result.reason, result.log_tail)
    assert result.verification.ok and result.details["optimize_for_inference"] is optimized


def test_torchscript_cpp_refuses_optimize_without_freeze(tmp_path):
    from stackcost.backends import load_backend

    cell = Cell(
        model=MODELS["mnist-cnn"][0],
        backend="torchscript-cpp",
        resolution=28,
        backend_options={"freeze": "false", "optimize": "true"},
    )
    with pytest.raises(ValueError, match="torchscript-cpp optimize=true needs freeze=true"):
        load_backend("torchscript-cpp").export(None, torch.zeros(1, 1, 28, 28), cell, tmp_path)


@pytest.mark.slow
def test_mismatched_weights_fail_with_the_name(native_build, tmp_path):
    # A weights file lacking one tensor: the program refuses it and names the tensor.
    backend = load_backend("libtorch")
    original = backend.export

    def drop_one(model, example, cell, workdir):
        args = original(model, example, cell, workdir)
        state = dict(model.state_dict())
        del state["fc2.bias"]
        write_tensors(workdir / "weights.scw", state)
        return args

    backend.export = drop_one
    ref, resolution = MODELS["mnist-cnn"]
    cell = Cell(model=ref, backend="libtorch", batch_size=1, resolution=resolution, threads=1)
    model = zoo.build_model(ref, resolution)
    with pytest.raises(RuntimeError, match="no tensor fc2.bias"):
        backend.run_native(model, example(ref, 28), cell, PrepareContext(tmp_path), QUICK)


def test_libtorch_refuses_a_model_it_has_no_definition_of():
    cell = Cell(model=ModelRef(name="mlp", num_classes=10, in_channels=1), backend="libtorch")
    assert load_backend("libtorch").why_not(cell).startswith("no C++ definition of mlp")
    # A traced graph needs no definition: torchscript-cpp runs it.
    assert load_backend("torchscript-cpp").why_not(cell) is None


class _IdsAndMask(torch.nn.Module):
    """Token ids (int64) and a float mask in, several outputs out, one of them int64."""

    def __init__(self, as_dict: bool) -> None:
        super().__init__()
        self.as_dict = as_dict
        self.emb = torch.nn.Embedding(50, 8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, ids, mask):
        h = self.emb(ids) * mask.unsqueeze(-1)
        logits = self.head(h)
        if self.as_dict:
            return {"logits": logits, "pooled": h.sum(1)}
        return logits, (h.mean(1), logits.argmax(-1))


@pytest.mark.slow
@pytest.mark.parametrize("keyword", [True, False])
def test_torchscript_cpp_runs_several_inputs_and_outputs(native_build, tmp_path, keyword):
    # By name the example lists the mask first: the file follows forward's schema instead.
    from stackcost.verify import leaves, verify
    from stackcost.workload import Example

    torch.manual_seed(0)
    model = _IdsAndMask(as_dict=keyword).eval()
    ids = torch.randint(0, 50, (2, 6), dtype=torch.int64)
    mask = (torch.rand(2, 6) > 0.3).float()
    if keyword:
        ex = Example(("mask", "ids"), (mask, ids), keyword=True)
    else:
        ex = Example(("ids", "mask"), (ids, mask))
    cell = Cell(
        model=ModelRef(name="mlp"), backend="torchscript-cpp", sizes={"seq_len": 6}, threads=1
    )
    with torch.inference_mode():
        reference = leaves(ex.call(model))
    answer = load_backend("torchscript-cpp").run_native(
        model, ex, cell, PrepareContext(tmp_path), QUICK
    )
    assert len(answer["output"]) == len(reference) == (2 if keyword else 3)
    if not keyword:
        assert answer["output"][2].dtype == "int64"  # argmax comes back as ints
    v = verify(answer["output"], reference, 1e-5)
    assert v.ok, v
    assert answer["details"]["forward_inputs"] == 2
