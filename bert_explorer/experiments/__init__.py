"""Ablation studies (Devlin et al. 2019, Section 5 and Appendix C; Tables 5-8), headless.

* :mod:`.paper`   the paper's numbers as data, each with the table it comes from;
* :mod:`.grid`    a *recipe* (a task or two, shared settings, axes) expanded into *cells*;
                  cells with the same pre-training settings share one pre-trained checkpoint;
* :mod:`.runner`  runs the cells into an ablation directory, resumable, failures recorded;
* :mod:`.results` the results table beside the paper's numbers, the four "directions",
                  CSV and Markdown export, plotly figures;
* :mod:`.miniatures` Table 6 with Google's pre-trained miniatures (a recipe with ``"pretrained": "hub"``):
                  our seeds' mean ± spread beside Turc et al. 2019 and Table 6, a table, a figure, a caption;
* :mod:`.ltr`     fine-tuning a left-to-right model (with or without a BiLSTM on top);
* :mod:`.pairs`   a sentence-pair task made from corpus documents (no MNLI/QNLI offline).

No Streamlit here: the page ``pages/14_Ablation_studio.py`` and ``bert-explorer ablate`` are
two front ends over these functions.
"""
