import math

from stackcost.measure.stats import summarize
from stackcost.result import RepetitionResult
from stackcost.verify import Verification


def test_short_results_survive_the_worker_json():
    """Fewer than 6 samples give no CI (NaN); a NaN output gives inf error. Both round-trip."""
    r = RepetitionResult(
        status="wrong",
        stats=summarize([3_000_000, 3_100_000, 2_900_000]),
        verification=Verification(
            max_abs_err=math.inf, max_rel_err=math.inf, tolerance=1e-4, ok=False
        ),
    )
    back = RepetitionResult.model_validate_json(r.model_dump_json())
    assert math.isnan(back.stats.ci_low_ms) and back.verification.max_rel_err == math.inf
