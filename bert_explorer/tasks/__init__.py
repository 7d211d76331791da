"""Fine-tuning tasks (paper, Section 4, Figure 4): what each kind of task is and does.

* :mod:`.registry`  the six task types by name (classification, pair-classification, regression,
                    ner, qa, multiple-choice) and :func:`~.registry.task_type`, which turns a name
                    into its object once, where a person or a file names it;
* :mod:`.base`      what every task type holds and does (featurize, collate, loss, evaluate,
                    predict), and the fields of a registry entry;
* :mod:`.sequence`, :mod:`.tagging`, :mod:`.spans`, :mod:`.choice`
                    one kind of answer each: a label or a value from [CLS], a tag per word, an
                    answer span in a passage, one of several candidates;
* :mod:`.metrics`   the scores GLUE and CoNLL report; :mod:`.squad` SQuAD's exact match and F1.

This package sits between ``data/`` (which reads examples *of* a task type) and ``model/``: it
needs the tokenizer's encodings and the model's ``IGNORE`` label, nothing from ``data/`` or
``train/``; the training loops in ``train/`` and ``experiments/`` use it.
"""
