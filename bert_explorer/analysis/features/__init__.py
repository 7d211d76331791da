"""Sparse features of one layer: a sparse autoencoder (SAE) trained on the residual stream after
layer l, the features it finds, and what they do to the masked-word probe.

* ``sae.py``: the TopK autoencoder (Gao et al. 2024) and its training on a matrix of activations;
  variance explained, L0, dead and dense features.
* ``splice.py``: the model run with layer l's output replaced (by the SAE's reconstruction, by its
  mean) for the masked-LM loss, and a feature added or clamped at one token (steering).
* ``build.py``: the activations of a corpus, the trained SAE and its feature statistics as one
  disk-cache entry keyed by the weights' fingerprint, the layer and the settings; what the page,
  the CLI and the background builder read.
"""
