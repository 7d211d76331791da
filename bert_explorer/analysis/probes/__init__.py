"""The two pre-training tasks asked directly (paper, Section 3.1 and Figure 1).

* ``pretraining_tasks``: the masked-word probe (the MLM head's guesses at a ``[MASK]``, layer by
  layer too) and the next-sentence probe (the NSP head's P(IsNext)), the 80/10/10 masking shown;
* ``check_set``: a small hand-written set of cloze sentences and sentence pairs, scored.
"""
