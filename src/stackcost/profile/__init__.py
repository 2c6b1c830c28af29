"""Where the time of a measured step goes: kernels vs overhead (CPU), compute vs copies
vs idle (GPU), with the remainder the profilers did not see kept in view.

torch and onnxruntime are imported inside the functions, so importing this package
costs neither.
"""

from __future__ import annotations

from stackcost.profile.breakdown import Breakdown, OpRow
from stackcost.profile.kineto_trace import kineto_breakdown
from stackcost.profile.ort_profile import breakdown_from_trace, profile_ort
from stackcost.profile.torch_profile import profile_step

__all__ = [
    "Breakdown",
    "OpRow",
    "breakdown_from_trace",
    "kineto_breakdown",
    "profile_ort",
    "profile_step",
]
