"""After fine-tuning: what a fine-tuned model learned and where it fails, example by example
(paper, Section 4 and Figure 4).

* ``predictions``: the dev set answered example by example (kept in the run), sorted and filtered;
* ``slices``: the dev score by gold answer, input length and the upload's other columns;
* ``change``: the [CLS] vectors before and after fine-tuning, their separation, and CKA layer by layer;
* ``calibration``: the reliability diagram and expected calibration error.
"""
