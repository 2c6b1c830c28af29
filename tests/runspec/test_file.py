"""Sweep specs: valid files expand to the grid; invalid ones name the key and line."""

import pytest

from stackcost.cli import main
from stackcost.errors import SpecError
from stackcost.runspec.file import load_sweep

GOOD = """\
models: [mlp, {name: mnist-cnn, init: kaiming-normal}]
backends: [eager, onnxruntime]
batch_sizes: 1..64x8
resolutions: [28, 32]
repeats: 2
protocol:
  min_time_s: 0.2
backend_options:
  onnxruntime: {exporter: legacy}
"""


def write(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_good_spec_expands_to_the_grid(tmp_path):
    spec = load_sweep(write(tmp_path, GOOD))
    assert spec.batch_sizes == [1, 8, 64] and spec.resolutions == [28, 32]
    assert spec.repeats == 2 and spec.protocol.min_time_s == 0.2
    assert spec.models[1].init == "kaiming-normal" and spec.models[1].num_classes == 10
    assert len(spec.cells()) == 2 * 2 * 3 * 2
    assert spec.backend_options == {"onnxruntime": {"exporter": "legacy"}}


def test_flags_override_the_file_and_protocol_merges(tmp_path):
    spec = load_sweep(write(tmp_path, GOOD), {"batch_sizes": [2], "protocol": {"max_time_s": 3.0}})
    assert spec.batch_sizes == [2]
    assert spec.protocol.min_time_s == 0.2 and spec.protocol.max_time_s == 3.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("models: [mlp]\nbackends: [eager]\nbatch_size: [1]\n", ":3: unknown key 'batch_size'"),
        ("models: [mlp]\nbackends: []\n", ":2: backends must not be empty"),
        ("models: []\n", ":1: models must not be empty"),
        (
            "models: [mlp]\nbatch_sizes: 64..8x2\n",
            ":2: batch_sizes: batch size range '64..8x2' is reversed",
        ),
        (
            "models: [mlp]\nbatch_sizes: 8..x2\n",
            ":2: batch_sizes: batch size range '8..x2' is malformed",
        ),
        ("models: [mlp]\nrepeats: three\n", ":2: repeats = 'three'"),
        ("models:\n  - mlp\n  - resnet51\n", ":3: models[1]: unknown model 'resnet51'"),
        (
            "models: [mlp]\nbackends:\n  - eager\n  - tensorrt\n",
            ":4: backends[1]: unknown backend 'tensorrt'",
        ),
        (
            "models: [mlp]\nprotocol:\n  min_tim: 2\n",
            ":3: unknown key 'min_tim' (allowed: min_time_s",
        ),
        ("models: [{name: mlp, colour: red}]\n", ":1: unknown key 'colour' (allowed: name"),
        ("models: [resnet18]\nresolutions: [16]\n", ":2: resolutions: resolution 16 is too small"),
        ("models: [mlp\n", ":2: not valid YAML"),
        ("- just a list\n", ":1: a sweep spec is a mapping"),
        ("backends: [eager]\n", ":1: missing required key 'models'"),
    ],
)
def test_bad_specs_name_key_and_line(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as exc:
        load_sweep(path)
    assert f"{path}{expected}" in str(exc.value)


def test_cli_bad_spec_exits_2_and_writes_nothing(tmp_path, capsys):
    path = write(tmp_path, "models: [mlp]\nbatch_sizes: 0..4\n")
    code = main(["sweep", str(path), "--db", str(tmp_path / "s.db")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and ":2:" in err
    assert not (tmp_path / "s.db").exists()


def test_cli_sweep_from_flags_validates_models(tmp_path, capsys):
    code = main(["sweep", "--models", "mlp,resnet51", "--db", str(tmp_path / "s.db")])
    assert code == 2 and "unknown model 'resnet51'" in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()


@pytest.mark.whole_machine  # examples/scaling.yaml asks for 2 threads
def test_shipped_examples_are_valid():
    from tests.conftest import ROOT

    for name in ("scaling.yaml", "frameworks.yaml"):
        spec = load_sweep(ROOT / "examples" / name)
        assert spec.repeats >= 1 and spec.cells()
    # The study's GPU figures: the four levels, one axis each, on cuda.
    batch = load_sweep(ROOT / "examples" / "levels-gpu-batch.yaml").cells()
    assert {c.batch_size for c in batch} == {2**i for i in range(9)}
    resolution = load_sweep(ROOT / "examples" / "levels-gpu-resolution.yaml").cells()
    assert len({c.sizes["resolution"] for c in resolution}) == 5
    for cells in (batch, resolution):
        assert {c.device for c in cells} == {"cuda"}
        assert {c.backend for c in cells} == {"eager", "torchscript", "libtorch", "cudnn"}


def test_small_aliases_are_fine(tmp_path):
    text = "models:\n  - {name: mlp, init: &i kaiming-normal}\n  - {name: mnist-cnn, init: *i}\n"
    spec = load_sweep(write(tmp_path, text))
    assert [m.init for m in spec.models] == ["kaiming-normal"] * 2


def test_bounds_count_values_as_aliases_expand_them():
    from stackcost.runspec.reader import MAX_VALUES, check_bounds

    check_bounds("a: [" + "1, " * (MAX_VALUES - 10) + "]\n", "flat.yaml")
    doubling = ["l0: &l0 [x, x]"] + [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, 20)]
    check_bounds("\n".join(doubling[:14]), "x.yaml")  # about 2^16 values: under the bound
    with pytest.raises(SpecError, match=r"x.yaml:15: .* once its aliases are expanded"):
        check_bounds("\n".join(doubling), "x.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "models: [mlp]\n" + "k" * 900 + ": 1\n",
        "models: [mlp]\nbackends: [" + "b" * 5000 + "]\n",
        "models: [" + "m" * 5000 + "]\n",
        "models: [mlp]\nprotocol: {" + "p" * 900 + ": 1}\n",
        "models: [mlp]\nbatch_sizes: '" + "9" * 5000 + "..1'\n",
        "models: [mlp]\nrepeats: " + "9" * 5000 + "\n",
        "models: [mlp]\nrepeats: 2001-02-30\n",
    ],
)
def test_messages_stay_one_short_line_whatever_the_value(tmp_path, text):
    deep = tmp_path / ("d" * 200) / ("e" * 200)
    deep.mkdir(parents=True)
    with pytest.raises(SpecError) as exc:
        load_sweep(write(deep, text))
    message = str(exc.value)
    assert "\n" not in message and len(message) <= 300, message
    assert "spec.yaml:" in message  # the clipped path still ends in the file and line


def test_a_generate_spec_makes_generate_cells(tmp_path):
    spec = load_sweep(
        write(
            tmp_path,
            "models: [llama-tiny]\nbackends: [eager, llama.cpp]\nscenarios: [generate]\n"
            "prompt_lens: [8, 16]\nnew_tokens: 4\nbatch_sizes: [1]\nthreads: [1]\n",
        )
    )
    cells = spec.cells()
    assert len(cells) == 4 and {c.mode for c in cells} == {"generate"}
    assert {c.sizes["prompt_len"] for c in cells} == {8, 16}
    assert all(c.sizes["new_tokens"] == 4 and c.scenario is None for c in cells)
