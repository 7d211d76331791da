"""Nearest neighbours in a corpus (exBERT; Hoover, Strobelt & Gehrmann 2020): which tokens of a
corpus does the model see as most like one of yours, at a chosen layer?

* ``index``: the corpus cut into sentences and every token's vector at the chosen layers, built in
  shards into one disk-cache entry (started in the background by ``runs/neighbour_jobs.py``);
* ``search``: the exact search over that entry, and the design and measurements behind it.
"""
