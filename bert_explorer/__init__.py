"""BERT Explorer: our own PyTorch BERT (Devlin et al. 2019) with the tools to see how it works,
pre-train it, fine-tune it and compare the paper's ablations."""
__version__ = "0.1.0"
