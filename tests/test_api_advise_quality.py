"""advise's quality bound on a fine-tuned checkpoint and its own examples: quality is
scored held out only for the quantized precisions that could win, each entry says what
its rung and precision lost, and a search asked again scores nothing twice."""

from __future__ import annotations

import sqlite3

import pytest

from stackcost.advise.constraints import Constraints
from stackcost.api.advise import advise, search_of
from stackcost.errors import SpecError
from stackcost.measure.protocol import Protocol
from tests.scenarios.test_user_heldout import classifier  # noqa: F401 (a fixture)

pytest.importorskip("transformers")
QUICK = Protocol(min_time_s=0.05, max_time_s=0.3, warmup_max_time_s=0.2, target_ci=0.2)


def count(db, table):
    return sqlite3.connect(db).execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def test_quality_is_scored_for_the_precisions_that_could_win_and_never_twice(
    classifier,  # noqa: F811
    tmp_path,
):
    search = search_of(
        f"hf:{classifier / 'model'}", backends=["onnxruntime"], precisions=["fp32", "int8-dyn"],
        batch_sizes=[1], threads=[1], screen_protocol=QUICK, final_protocol=QUICK,
        final_repeats=3, constraints=Constraints(max_quality_loss=50.0), margin=0.9,
        quality_data=str(classifier / "test.csv"),
    )  # fmt: skip
    db = tmp_path / "q.db"
    lines: list[str] = []
    answer = advise(search, db, on_phase=lines.append)
    assert any(line == "quality, held out: onnxruntime int8-dyn" for line in lines), lines
    judged = {(q["backend"], q["precision"]): q for q in answer.quality}
    assert judged[("onnxruntime", "fp32")]["loss"] == 0.0  # verified, not scored
    assert judged[("onnxruntime", "int8-dyn")]["loss"] is not None
    assert all(e.quality for e in answer.entries), answer.entries
    assert answer.runs["quality"]
    scored, measured = count(db, "heldout"), count(db, "repetitions")
    again = advise(search, db)
    assert (count(db, "heldout"), count(db, "repetitions")) == (scored, measured)
    assert again.recommended is not None and answer.recommended is not None
    assert again.recommended.label == answer.recommended.label


def test_the_quality_bound_needs_what_it_is_judged_on(classifier, tmp_path):  # noqa: F811
    model = f"hf:{classifier / 'model'}"
    bound = Constraints(max_quality_loss=1.0)
    with pytest.raises(SpecError, match="needs --data"):
        advise(search_of(model, backends=["onnxruntime"], constraints=bound), tmp_path / "a.db")
    with pytest.raises(SpecError, match="give both"):
        advise(search_of(model, backends=["onnxruntime"], quality_data="x.csv"), tmp_path / "a.db")
    with pytest.raises(SpecError, match="no such file"):
        advise(
            search_of(model, backends=["onnxruntime"], constraints=bound, quality_data="no.csv"),
            tmp_path / "a.db",
        )
    assert not (tmp_path / "a.db").exists()
