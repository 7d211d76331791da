"""When to trust Integrated Gradients (Sundararajan et al. 2017): the completeness axiom says the
attributions add up to f(x) − f(baseline); the convergence delta is how far the numerical
integral misses. Our rule and its step schedule; nothing here needs a model or a result."""
from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_STEPS = 50          # where the automatic schedule starts
MAX_STEPS = 400             # where it stops: 50 -> 100 -> 200 -> 400
RELIABLE_FRACTION = 0.05    # reliable: |delta| <= 5 % of |f(x) - f(x')|
MIN_DIFFERENCE = 1e-3       # |f(x) - f(x')| below this (nats / f's units): nothing to split


@dataclass(frozen=True)
class Reliability:
    reliable: bool
    reason: str   # one sentence with the numbers, for the page


def reliability(delta: float, difference: float, n_steps: int | None = None,
                fraction: float = RELIABLE_FRACTION, min_difference: float = MIN_DIFFERENCE) -> Reliability:
    """The rule: Integrated Gradients is reliable when |delta| <= ``fraction`` x |f(x) - f(x')|
    and |f(x) - f(x')| >= ``min_difference``.

    ``delta`` is the convergence delta (Σ attributions - (f(x) - f(x'))), ``difference`` is
    f(x) - f(x'). A difference of practically zero fails whatever the delta: there is nothing
    to split, and any delta is as large as the thing explained."""
    steps = f" after {n_steps} integration steps" if n_steps else ""
    if not math.isfinite(delta) or not math.isfinite(difference):
        return Reliability(False, f"This result is unreliable: the integral did not give finite numbers{steps} "
                                  f"(delta {delta}, f(x) − f(baseline) {difference}).")
    if abs(difference) < min_difference:
        return Reliability(False, f"This result is unreliable: f(x) − f(baseline) = {difference:.2g} is practically "
                                  f"zero (below {min_difference:g}), so there is nothing for the attributions to split "
                                  f"and the convergence delta ({delta:.2g}{steps}) is as large as what they explain.")
    share = abs(delta) / abs(difference)
    if share > fraction:
        return Reliability(False, f"This result is unreliable: the convergence delta ({delta:.3g}) is still "
                                  f"{share:.0%} of f(x) − f(baseline) ({difference:.3g}){steps}, more than the "
                                  f"{fraction:.0%} allowed, so the token shares may be off by about that much.")
    return Reliability(True, f"Reliable: the convergence delta ({delta:.2g}) is {share:.1%} of f(x) − f(baseline) "
                             f"({difference:.3g}){steps}, within the {fraction:.0%} allowed.")


def step_schedule(start: int = DEFAULT_STEPS, cap: int = MAX_STEPS) -> list[int]:
    """The step counts tried in order: ``start``, doubled until ``cap`` (50 -> 100 -> 200 -> 400);
    a start at or above the cap is tried alone."""
    if start < 1:
        raise ValueError("n_steps must be at least 1")
    steps = [start]
    while steps[-1] < cap:
        steps.append(min(cap, steps[-1] * 2))
    return steps
