"""Two models side by side: what fine-tuning (or more pre-training, or another objective) changed.

* ``measures``: linear CKA (Kornblith et al. 2019) and the Jensen-Shannon distance of attention rows;
* ``two_models``: both models run on the same sentences, what can be compared, the results and what
  they say;
* ``held_out``: sentences neither the default model's pre-training nor a bbc-topics fine-tuning read;
* ``candidates``: which models there are to compare (short names, checkpoints, fine-tuning runs);
* ``verdict``: did a fine-tuning run learn something (the rule that picks the default model B).
"""
