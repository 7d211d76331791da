"""Attention: what the heads look at and how one layer computes it (paper, Section 3; Vaswani et al. 2017).

* ``heads``: every head's attention map of one input, the heads' measures and labels (Clark et al.
  2019), attention rollout and head ablation;
* ``bertviz_offline``: bertviz's head and model views of those maps, rendered with no network;
* ``layer_steps``: one encoder layer step by step, from the input vectors to the layer's output;
* ``timelapse``: one sentence seen by every checkpoint of a pre-training run (a head's attention
  and the masked-word guesses, step by step).
"""
