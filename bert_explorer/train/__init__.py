"""Training: pre-training (MLM + NSP) and fine-tuning loops, runs as directories."""
