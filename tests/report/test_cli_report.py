"""`stackcost report` on a real store: every output format, and the bad-input cases."""

import json

import pytest

from stackcost.cli import main
from tests.report.conftest import build_store


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "s.db"
    store, run_id = build_store(path)
    store.close()
    return path, run_id


def test_html_report_for_the_latest_run(db, tmp_path, capsys):
    path, _ = db
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(path), "-o", str(out)]) == 0
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lstrip().lower().startswith("<!doctype")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # plotly inlined: no element loads anything from elsewhere
    assert '<script src="http' not in html and '<link href="http' not in html


def test_exports_and_figures(db, tmp_path, capsys):
    path, run_id = db
    assert main(["report", run_id, "--db", str(path), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload
    figures = tmp_path / "figs"
    assert (
        main(
            [
                "report",
                "--db",
                str(path),
                "--format",
                "md",
                "-o",
                str(tmp_path / "r.md"),
                "--figures",
                str(figures),
            ]
        )
        == 0
    )
    assert (tmp_path / "r.md").read_text().count("|") > 10
    assert any(p.suffix == ".pdf" for p in figures.iterdir())
    assert any(p.suffix == ".png" for p in figures.iterdir())


def test_unknown_run_and_missing_db_exit_2(db, tmp_path, capsys):
    path, _ = db
    assert main(["report", "20990101-deadbeef", "--db", str(path)]) == 2
    err = capsys.readouterr().err
    assert "run '20990101-deadbeef' is not in" in err and err.count("\n") == 1
    assert main(["report", "--db", str(tmp_path / "none.db")]) == 2
    assert "no database" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
