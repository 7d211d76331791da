"""How long probing every layer of a model takes on this machine (What each layer knows, ``analysis/layers``):
the layer vectors, the linear probes and the scoring of their predictions, each at a rate measured here or
stated below from measurements; the time a student's click is bounded by counts every thread's CPU."""
from __future__ import annotations

from .estimate import batches_flops, cpu_flop_s

# Layer probing: the vectors of every layer (one forward pass through all of them, the hidden states kept),
# then a linear probe per layer for the task and its control, each L-BFGS evaluation a product of the
# [n, H] vectors with the [H, labels] weights forward and back (6·n·H·labels FLOPs) plus a fixed cost.
# Measured (minilm-mlm-nsp, WNUT-16): 104-118 evaluations for 100 iterations.
PROBE_EVALS_PER_ITER = 1.1
PROBE_EVAL_S = 0.5e-3
PROBE_VECTOR_S = 2e-9            # keeping a position's hidden states: [L+1, H] floats copied, per float
# Scoring a probe's held-out predictions (macro-F1 or accuracy through scikit-learn, entity F1), which the run does
# for every probe, each layer's entity F1 and each resampling of the margin's bootstrap: measured with
# minilm-mlm-nsp on 240 WNUT-16 sentences (215 scorings of 965 held-out words, 2.8 s of one core) and 60 BBC
# articles (215 of 12, 0.65 s), about PROBE_SCORE_S + PROBE_SCORE_ROW_S a held-out row each. Left out, the
# estimate said half the CPU the run took.
PROBE_SCORE_S = 3e-3
PROBE_SCORE_ROW_S = 1e-5


def probing_estimate(num_layers: int, hidden_size: int, shapes, n_train: int, n_test: int, n_labels: int,
                     max_iter: int, threads: int, features_cached: bool = False,
                     intermediate_size: int | None = None, scorings: int | None = None) -> dict:
    """Seconds of probing every layer of a model: the forward passes over ``shapes`` through all
    ``num_layers`` layers on ``threads`` threads (nothing when the vectors are in the cache), then 2·(L+1)
    probes of ``max_iter`` L-BFGS iterations over ``n_train`` vectors of ``n_labels`` labels (one thread
    each), then ``scorings`` scorings of the ``n_test`` held-out predictions (one thread; 2·(L+1) by
    default, one a probe). ``seconds`` is the time it takes; ``cpu_seconds`` the CPU it costs, each thread of
    the forward passes counted (what a student's click is bounded by)."""
    flop_s, basis = cpu_flop_s("forward", hidden_size, threads, intermediate_size=intermediate_size)
    copied = sum(b * t for b, t in shapes) * (num_layers + 1) * hidden_size
    features = 0.0 if features_cached else \
        batches_flops(shapes, num_layers, hidden_size, intermediate_size) / flop_s + copied * PROBE_VECTOR_S
    probe_flop_s, _ = cpu_flop_s("probe", hidden_size, 1)
    evaluations = PROBE_EVALS_PER_ITER * max_iter
    one = evaluations * (PROBE_EVAL_S + 6.0 * n_train * hidden_size * n_labels / probe_flop_s) \
        + 2.0 * n_test * hidden_size * n_labels / probe_flop_s
    probes = 2 * (num_layers + 1) * one
    scorings = 2 * (num_layers + 1) if scorings is None else scorings
    scoring = scorings * (PROBE_SCORE_S + PROBE_SCORE_ROW_S * n_test)
    return {"features_seconds": features, "probes_seconds": probes, "scoring_seconds": scoring,
            "seconds": features + probes + scoring, "cpu_seconds": features * max(1, int(threads)) + probes + scoring,
            "basis": basis, "probes": 2 * (num_layers + 1), "scorings": scorings}
