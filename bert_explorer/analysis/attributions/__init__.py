"""Which input tokens made BERT say that? (Sundararajan, Taly & Yan 2017, "Axiomatic Attribution
for Deep Networks").

* ``integrated_gradients``: Integrated Gradients on the input embeddings (token, segment and
  position) for the masked word, the next sentence or a fine-tuned classifier's label;
* ``reliability``: when to trust the result (the convergence delta against the difference it
  splits) and the schedule of steps that tries to meet that rule.
"""
