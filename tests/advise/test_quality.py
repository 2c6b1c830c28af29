from types import SimpleNamespace

import pytest

from stackcost.advise.quality import BREAKS, UNDECIDED, WITHIN, judge, lossless


def row(drop, low, high, status="ok"):
    return SimpleNamespace(
        backend="onnxruntime", precision="int8", status=status, reason="",
        drop_pt=drop, drop_low_pt=low, drop_high_pt=high,
    )  # fmt: skip


@pytest.mark.parametrize(
    "drop, low, high, verdict",
    [
        (0.2, -0.4, 0.8, WITHIN),  # the whole interval within 1 pt
        (2.0, 1.2, 2.8, BREAKS),  # the whole interval beyond it
        (0.9, 0.1, 1.7, UNDECIDED),  # straddles it: not recommended
    ],
)
def test_a_precision_is_within_the_bound_only_when_its_whole_interval_is(drop, low, high, verdict):
    q = judge(row(drop, low, high), bound=1.0, decoder=False)
    assert q.verdict == verdict and q.within == (verdict == WITHIN)
    assert q.unit == "pt" and q.words().startswith(f"{drop:+.2g} pt [")


def test_a_decoder_is_judged_on_its_perplexity_increase():
    r = SimpleNamespace(
        backend="llama.cpp", precision="w4", status="ok", reason="",
        ppl_increase_pct=3.0, ppl_increase_low_pct=2.0, ppl_increase_high_pct=4.0,
    )  # fmt: skip
    assert judge(r, bound=5.0, decoder=True).within
    assert judge(r, bound=3.0, decoder=True).verdict == UNDECIDED
    assert judge(r, bound=5.0, decoder=True).unit == "%"


def test_a_row_that_scored_nothing_keeps_its_status_and_reason():
    q = judge(row(None, None, None, status="unsupported"), bound=1.0, decoder=False)
    assert q.verdict == "unsupported" and not q.within


def test_fp32_loses_nothing_to_judge():
    assert lossless("openvino").within and lossless("openvino").loss == 0.0
