"""The GPU kit: everything a run on a rented GPU machine needs, built and proven on the CPU.

    python -m tools.gpu_kit prepare --into .gpu-travel       # here: the inputs that travel
    python -m tools.gpu_kit run --steps teaching-model       # there: one command per call
    python -m tools.gpu_kit join FETCHED --into .gpu-results # here: rebuild what came back
    python -m tools.gpu_kit run --dry-run                    # here: every step, tiny, on the CPU

Run from the repository's root, on either machine: the kit works on the repository (its tests,
``bench/``, ``assets/``), and the GPU machine has the repository, not an installed package.

* :mod:`.travel`: what goes there (prepared corpora, data sets, MiniLM's word embeddings, pytest)
  and what comes back (archives cut into parts that fit the way back, joined and checked by SHA-256).
* :mod:`.plan`: the steps' settings (real and tiny) and their planned minutes, from
  ``train/estimate.py``'s FLOPs count and its stated GPU assumption.
* :mod:`.steps`: the steps themselves: tests, teaching-model, paper-mini, explorer-mini, bench.
* :mod:`.session`: one command that runs the chosen steps within a time budget.
* :mod:`.offline`: the import blocker the dry run uses to stand in for the GPU machine.

Nothing here imports streamlit, plotly, captum, bertviz or gensim. The kit is a front end over
``train/`` and ``experiments/`` that only this project's own GPU runs use, so it stays out of the
installed package: it imports ``bert_explorer``, and nothing in ``bert_explorer`` imports it.
"""
