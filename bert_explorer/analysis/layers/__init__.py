"""What each layer holds: every layer's vectors, and what a linear probe reads from them.

* ``vectors``: the vectors of words (their first WordPiece) and of whole texts at every layer,
  computed once in batches of similar length;
* ``probing``: a linear probe per layer for a linguistic task, with a control task (Tenney et al.
  2019; Hewitt & Liang 2019), kept in the disk cache;
* ``features``: chosen layers' vectors written out as google-research/bert's ``extract_features.py``
  does (the feature-based approach, paper Section 5.3).
"""
