"""stackcost train: the loop, the shared weights, the store, bad input, divergence.

Tiny on purpose (mlp on digits, --limit, 1-2 epochs, one thread): the whole file stays
well under a minute on 2 cores, Inductor's compile included.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
from pathlib import Path

import pytest
import torch

from stackcost import zoo
from stackcost.cell import Cell, TrainConfig
from stackcost.cli import main
from stackcost.errors import SpecError
from stackcost.result import MEASURED_STATUSES
from stackcost.runspec.run import model_ref
from stackcost.store.database import SCHEMA_VERSION, Store

TINY = ["--limit", "256", "--threads", "1", "--quiet"]


def train(db, *argv: str) -> int:
    return main(["train", "mlp", *argv, *TINY, "--db", str(db)])


def rows(db, sql: str, *params) -> list[sqlite3.Row]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def repetitions(db) -> dict[str, dict]:
    """backend -> the stored result_json, plus the repetition id."""
    out = {}
    for r in rows(
        db,
        "SELECT c.backend, r.id, r.status, r.result_json FROM repetitions r"
        " JOIN cells c ON r.cell_id = c.id",
    ):
        out[r["backend"]] = {**json.loads(r["result_json"]), "id": r["id"]}
    return out


# The module's one training run, which the tests below read (Inductor's included), and whose
# copy the resume test continues: one command (one warm starter) instead of three.
TRAINED = ["--backends", "eager,torchscript,onnxruntime,inductor", "--epochs", "2", "--lr", "0.1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    db = tmp_path_factory.mktemp("train") / "t.db"
    return train(db, *TRAINED), db


def copy_store(source: Path, target: Path) -> None:
    """A copy of a store (WAL included), for a test that changes it."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


def test_inference_cell_keys_are_unchanged():
    cell = Cell(model=model_ref("mlp"), backend="eager")
    # The key's shape before size axes, Hugging Face fields and scenarios existed:
    # resolution at the top level, no model.config/head, no scenario.
    data = cell.model_dump(mode="json", exclude={"train", "sizes", "scenario"})
    data["resolution"] = cell.resolution
    for field in ("config", "head"):
        del data["model"][field]
    blob = json.dumps(data, sort_keys=True)
    assert cell.key() == hashlib.sha1(blob.encode()).hexdigest()[:16]
    trained = cell.model_copy(update={"mode": "train", "train": TrainConfig()})
    assert trained.key() != cell.model_copy(update={"mode": "train"}).key()


def test_loss_decreases_and_eval_accuracy_is_recorded(trained):
    code, db = trained
    assert code == 0
    for backend in ("eager", "torchscript"):
        # The cell's last try: a disturbed one that --on-disturbed retry replaced stays
        # stored before it, with its own epochs (the hypervisor's steal can do that).
        epochs = rows(
            db,
            "SELECT e.* FROM epochs e JOIN repetitions r ON e.repetition_id = r.id"
            " JOIN cells c ON r.cell_id = c.id WHERE c.backend=? AND r.id ="
            " (SELECT max(id) FROM repetitions WHERE cell_id = c.id) ORDER BY epoch",
            backend,
        )
        assert [e["epoch"] for e in epochs] == [1, 2]
        assert epochs[1]["train_loss"] < epochs[0]["train_loss"]
        for e in epochs:
            assert 0 <= e["eval_accuracy"] <= 1 and e["eval_samples"] == 256
            assert e["steps"] == 4 and e["train_samples"] == 256  # 256 / 64, drop_last
            assert e["loader_wait_s"] > 0 and e["step_s"] > 0
            assert e["copy_bytes_per_batch"] == 64 * 8 * 8 * 4 + 64 * 8  # fp32 x, int64 y
            assert e["copy_device"] == "cpu" and e["copy_pinned"] is None


def test_every_backend_starts_from_the_same_weights(trained):
    _, db = trained
    reps = repetitions(db)
    ref = model_ref("mlp", num_classes=10, in_channels=1)
    expected = zoo.weights_digest(zoo.build_model(ref, 8))
    assert reps["eager"]["weights_digest"] == reps["torchscript"]["weights_digest"] == expected


def test_step_times_feed_the_stats(trained):
    _, db = trained
    eager = repetitions(db)["eager"]
    assert eager["status"] in MEASURED_STATUSES and eager["cold_start_ms"] > 0
    n = rows(db, "SELECT count(*) FROM samples WHERE repetition_id=?", eager["id"])[0][0]
    assert n == 2 * 4 - 1  # every step but the first (the cold one)
    assert eager["throughput"] == pytest.approx(64 / (eager["stats"]["median_ms"] / 1e3))


def test_torchscript_trains_scripted_and_others_are_skipped(trained):
    _, db = trained
    reps = repetitions(db)
    details = reps["torchscript"]["details"]
    assert details["variant"] == "script" and details["parameters_shared_with_eager"]
    assert reps["onnxruntime"]["status"] == "unsupported"
    assert reps["onnxruntime"]["reason"].startswith("cannot train:")


def test_results_read_back_through_the_store(trained):
    _, db = trained
    with Store(db) as store:
        (run_id,) = store.run_ids()
        records = {c.backend: (c, r) for c, r in store.repetitions(run_id)}
    cell, result = records["eager"]
    assert cell.mode == "train" and cell.train.dataset == "digits" and cell.train.epochs == 2
    assert len(result.epochs) == 2 and result.epochs[-1].eval_accuracy is not None


def test_inductor_trains_and_records_what_it_compiled(trained):
    code, db = trained
    assert code == 0
    result = repetitions(db)["inductor"]
    assert result["status"] in MEASURED_STATUSES
    assert result["details"]["compiled"].startswith("module")
    assert result["details"]["eval_path"] == "eager"


def test_divergence_is_a_result_with_its_epoch(tmp_path, capsys):
    db = tmp_path / "d.db"
    assert train(db, "--backends", "eager", "--epochs", "2", "--lr", "1e6") == 1
    result = repetitions(db)["eager"]
    assert result["status"] == "diverged" and "epoch 1" in result["reason"]
    assert result["details"]["diverged_epoch"] == 1
    (epoch,) = rows(db, "SELECT complete, epoch FROM epochs")
    assert tuple(epoch) == (0, 1)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--dataset", "imagenet"], "unknown dataset 'imagenet'"),
        (["--dataset", "mnist", "--data-dir", "."], "train-images-idx3-ubyte"),
        (["--epochs", "0"], "epochs 0 must be a positive integer"),
        (["--batch-size", "-1"], "batch size -1"),
        (["--lr", "fast"], "learning rate 'fast' is not a number"),
        (["--lr", "0"], "learning rate '0' must be a positive number"),
        (["--lr", "nan"], "must be a positive number"),
        (["--backends", "onnxruntime"], "cannot train: onnxruntime"),
        (["--optimizer", "lbfgs"], "unknown optimizer 'lbfgs'"),
        (["--device", "gpu"], "unknown device 'gpu' (allowed: cpu, cuda)"),
        (
            ["--device", ","],
            "device ',': empty item at position 1; give a comma-separated list such as cpu,cuda",
        ),
        (["--pageable"], "--pageable is about the copy to a GPU: add --device cuda"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, needle):
    db = tmp_path / "bad.db"
    assert train(db, *argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not db.exists()


def test_torchscript_falls_back_to_trace_when_scripting_fails(tmp_path):
    from stackcost.backends import PrepareContext, load_backend
    from stackcost.workload import Example

    class Unscriptable(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, *xs):  # varargs: torch.jit.script refuses them
            return self.fc(xs[0])

    model = Unscriptable().train()
    cell = Cell(model=model_ref("mlp"), backend="torchscript", mode="train", train=TrainConfig())
    x, y = Example(("input",), (torch.randn(8, 4),)), torch.randint(0, 3, (8,))
    prepared = load_backend("torchscript").prepare_train(
        model,
        lambda p: torch.optim.SGD(p, lr=0.1),
        torch.nn.functional.cross_entropy,
        x,
        cell,
        PrepareContext(tmp_path),
    )
    assert prepared.details["variant"] == "trace"
    assert prepared.details["variant_source"] == "fallback" and prepared.details["script_error"]
    before = model.fc.weight.detach().clone()
    loss, logits = prepared.step(x, y)
    assert math.isfinite(loss.item()) and logits.shape == (8, 3)
    assert not torch.equal(before, model.fc.weight)  # the eager module's weights moved too


def test_a_version_2_store_gains_the_epochs_table(tmp_path):
    path = tmp_path / "v2.db"
    Store(path).close()
    con = sqlite3.connect(path)
    con.executescript("DROP TABLE epochs; UPDATE meta SET value='2' WHERE key='schema_version';")
    con.close()
    Store(path).close()
    assert rows(path, "SELECT value FROM meta")[0][0] == str(SCHEMA_VERSION) == "8"
    assert rows(path, "SELECT count(*) FROM epochs")[0][0] == 0


def test_report_shows_the_training_curves_in_a_browser(trained, tmp_path):
    """The training section renders from a real run: curves, no console errors."""
    from stackcost.api import load_runs
    from stackcost.report.html.page import write_html
    from tests.report.test_html import _open

    sync_api = pytest.importorskip("playwright.sync_api")
    from tests.report.test_html import ARGS, CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not installed")
    _, db = trained
    path = write_html(load_runs(db, []), tmp_path / "train.html")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            o = _open(browser, path)
            assert o.problems == [] and o.blocked == []
            section = o.page.locator("#training")
            assert section.count() == 1
            count = int(o.page.get_attribute("body", "data-figure-count"))
            assert o.page.get_attribute("body", "data-rendered") == str(count)
            text = o.page.inner_text("body")
            assert "held-out accuracy against time" in text
            assert "mlp · eager" in text and "mlp · torchscript" in text
            # Torchscript runs eager's kernels: its first losses agree with eager's.
            assert "relative difference from eager's loss" in text
            assert "mlp · torchscript: agrees" in text
            o.page.screenshot(path=tmp_path / "train.png", full_page=True)
        finally:
            browser.close()


def test_resume_trains_only_what_the_run_lacks(trained, tmp_path, capsys):
    code, stored = trained
    assert code == 0
    db = tmp_path / "r.db"
    copy_store(stored, db)  # the module's run: eager, torchscript and inductor trained
    argv = TRAINED
    before = repetitions(db)
    # As if the process had been killed while torchscript trained: its transaction (the
    # repetition, its samples and epochs) never committed. (Every try of it: a disturbed
    # one the fixture's run retried is stored too.)
    con = sqlite3.connect(db)
    lost = rows(
        db,
        "SELECT r.id FROM repetitions r JOIN cells c ON r.cell_id = c.id WHERE c.backend=?",
        "torchscript",
    )
    assert before["torchscript"]["id"] in [r["id"] for r in lost]
    for (repetition_id,) in lost:
        for table, key in (
            ("samples", "repetition_id"),
            ("epochs", "repetition_id"),
            ("repetitions", "id"),
        ):
            con.execute(f"DELETE FROM {table} WHERE {key}=?", (repetition_id,))
    con.commit()
    con.close()
    capsys.readouterr()
    assert train(db, *argv, "--resume") == 0
    # eager's and inductor's repetitions and onnxruntime's refusal are kept
    assert "3 repetitions already stored" in capsys.readouterr().err
    after = repetitions(db)
    for kept in ("eager", "onnxruntime", "inductor"):  # kept, not trained again
        assert after[kept]["id"] == before[kept]["id"]
    assert after["torchscript"]["status"] in MEASURED_STATUSES
    assert after["torchscript"]["weights_digest"] == after["eager"]["weights_digest"]
    assert len(rows(db, "SELECT id FROM runs")) == 1

    # A stored run that started from other weights is not continued: one line, exit 2.
    written = len(rows(db, "SELECT id FROM repetitions"))
    con = sqlite3.connect(db)
    eager_id = after["eager"]["id"]
    (text,) = con.execute("SELECT result_json FROM repetitions WHERE id=?", (eager_id,)).fetchone()
    blob = json.loads(text)
    blob["weights_digest"] = "0" * 16
    con.execute("UPDATE repetitions SET result_json=? WHERE id=?", (json.dumps(blob), eager_id))
    con.commit()
    con.close()
    capsys.readouterr()
    assert train(db, *argv, "--resume") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("stackcost: error: cannot resume run ") and "000000000000" in err
    assert len(rows(db, "SELECT id FROM repetitions")) == written  # nothing written


def test_the_refusal_names_every_backend_that_trains():
    from stackcost.execute.probe import learn
    from stackcost.runspec.train import check_backends

    with pytest.raises(SpecError) as refused:
        check_backends(["onnxruntime"], learn({"onnxruntime": {}}))
    for name in ("eager", "inductor", "torchscript", "tf", "tf-xla", "keras", "keras-xla"):
        assert name in str(refused.value)
    assert "jax, libtorch, onednn, cudnn)" in str(refused.value)


@pytest.mark.whole_machine  # 1 and 2 threads
def test_one_command_trains_at_every_thread_count_and_names_each_row(tmp_path, capsys):
    """The PyTorch/CUDA report's table is one command: threads (and devices) are lists."""
    db = tmp_path / "t.db"
    argv = ["train", "mlp", "--backends", "eager", "--epochs", "1", "--limit", "256"]
    assert main([*argv, "--threads", "1,2", "--device", "cpu", "--db", str(db)]) == 0
    cells = rows(db, "SELECT threads, device FROM cells ORDER BY threads")
    assert [(r["threads"], r["device"]) for r in cells] == [(1, "cpu"), (2, "cpu")]
    out = capsys.readouterr().out
    assert "where" in out and "t1 cpu" in out and "t2 cpu" in out


def test_a_stored_single_device_spec_reads_as_a_list_of_one():
    from stackcost.runspec.train import TrainSpec

    spec = TrainSpec(model=model_ref("mlp"), sizes={}, device="cpu")
    assert spec.devices == ["cpu"] and {c.device for c in spec.cells()} == {"cpu"}


def test_pageable_copies_are_a_training_cell_of_their_own_and_keys_stay():
    plain, pageable = TrainConfig(), TrainConfig(pageable=True)
    assert "pageable" not in plain.model_dump()  # cells stored before keep their keys
    ref = model_ref("mlp")
    cells = [Cell(model=ref, backend="eager", mode="train", train=t) for t in (plain, pageable)]
    assert cells[0].key() != cells[1].key()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_a_gpu_epoch_records_its_copies_pinned_or_pageable(tmp_path):
    for pageable in (False, True):
        db = tmp_path / f"{pageable}.db"
        argv = ["--backends", "eager", "--epochs", "1", "--device", "cuda"]
        assert train(db, *argv, *(["--pageable"] if pageable else [])) == 0
        epoch = repetitions(db)["eager"]["epochs"][0]
        assert epoch["copy_device"] == "cuda" and epoch["copy_pinned"] is (not pageable)
        assert epoch["copy_bytes_per_batch"] > 0 and epoch["copy_ms_per_batch"] > 0
        details = repetitions(db)["eager"]["details"]  # fp32 training is IEEE fp32, recorded
        assert details["cudnn_conv_fp32_precision"] == "ieee"
