"""The GPU kit: everything a run on a rented GPU machine needs, built and proven on the CPU.

    python -m bert_explorer.gpu prepare --into .gpu-travel       # here: the inputs that travel
    python -m bert_explorer.gpu run --steps teaching-model        # there: one command per call
    python -m bert_explorer.gpu join FETCHED --into .gpu-results  # here: rebuild what came back
    python -m bert_explorer.gpu run --dry-run                     # here: every step, tiny, on the CPU

* :mod:`.travel`: what goes there (prepared corpora, data sets, MiniLM's word embeddings, pytest)
  and what comes back (archives cut into parts that fit the way back, joined and checked by SHA-256).
* :mod:`.plan`: the steps' settings (real and tiny) and their planned minutes, from
  ``train/estimate.py``'s FLOPs count and its stated GPU assumption.
* :mod:`.steps`: the steps themselves: tests, teaching-model, paper-mini, explorer-mini, bench.
* :mod:`.session`: one command that runs the chosen steps within a time budget.
* :mod:`.offline`: the import blocker the dry run uses to stand in for the GPU machine.

Nothing here imports streamlit, plotly, captum, bertviz or gensim; this package sits beside
``cli/`` as a front end over ``train/`` and ``experiments/``.
"""
