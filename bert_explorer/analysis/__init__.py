"""Analyses of a BERT, grouped by what a person asks of the model (no Streamlit here):

* ``embeddings``: what the model reads before any attention (token, segment and position parts);
* ``attention/``: what the heads look at, one layer step by step, and the time-lapse of pre-training;
* ``probes/``: the two pre-training tasks asked directly (masked word, next sentence) and the check set;
* ``attributions/``: which input tokens made the model say that (Integrated Gradients) and when to trust it;
* ``layers/``: every layer's vectors and what a linear probe reads from them;
* ``comparison/``: two models side by side (CKA, attention JS distance) and which fine-tuning learned something;
* ``neighbours/``: the tokens of a corpus nearest to one of yours, and the index they are searched in;
* ``after_finetuning/``: a fine-tuned model's dev set example by example, slices, change and calibration.

Infrastructure lives elsewhere: the disk cache is ``bert_explorer/disk_cache.py``, the neighbour
index's background build ``runs/neighbour_jobs.py``, a page's results zip ``app/result_bundle.py``.
"""
