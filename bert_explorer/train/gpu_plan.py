"""Planning work for a GPU (tools/gpu_kit, the ablation planner): the rates and floors measured on one H200,
stated once. ``train.estimate`` reads them from here and hands them on."""
from __future__ import annotations


# ----- planning work for a GPU (tools/gpu_kit, the ablation planner) --------------------------
# Measured on one H200 in bf16 autocast with SDPA attention (docs/gpu-runs/: the bench, the teaching
# model and the paper-mini ablation, 11 pre-trainings and 37 fine-tunings in 416 s). Small BERTs
# (H <= 512) keep a GPU far from its 989 TFLOP/s dense bf16 peak: their matrices are small and a step
# is a few hundred kernel launches. BERT-Base at sequence length 128 fills it much better.
GPU_ASSUMED = "one H100/H200 in bf16"
GPU_FLOP_S_SMALL = 60e12          # effective FLOP/s on the small models (~6 % of peak; the step floor rules them)
GPU_FLOP_S_BASE = 220e12          # BERT-Base, seq 128, batch 128, eager: 219 TFLOP/s measured (258 compiled)
GPU_STEP_FLOOR_S = 0.036          # no pre-training step of a small model is quicker: 27-46 ms measured
                                  # (Tiny to Medium, batch 128 x 128), 41-47 ms for MiniLM's 12 layers
GPU_FT_STEP_FLOOR_S = 0.008       # the same for a fine-tuning step (batch 32): fitted to paper-mini's 37 cells
# A pre-training batch is masked and padded in Python on the host (data/pretraining.collate, one
# core, while the GPU waits): measured 3,000 sequences of 128 per second on this project's 2-core
# CPU; a GPU machine's core is assumed 1.3x faster.
HOST_MASKING_SEQ_PER_S = 3900.0
# Around the steps of one pre-training: building the model, its instances (tokenising is done once
# per process and corpus: data/pretraining.py keeps it), its evaluations and checkpoints: 2-3 s
# measured after the first, 8 s for the first.
GPU_PRETRAIN_RUN_S = 3.0
GPU_FINETUNE_RUN_S = 3.0          # reading a task, loading the pre-trained model, saving (paper-mini's cells)


def gpu_flop_s(hidden_size: int) -> float:
    """The assumed effective FLOP/s of the GPU for a model of this width."""
    return GPU_FLOP_S_BASE if hidden_size >= 768 else GPU_FLOP_S_SMALL


def gpu_pretrain_seconds(flops_per_token_: float, hidden_size: int, steps: int, batch_size: int, seq_len: int,
                         fill: float = 0.9) -> float:
    """Seconds of ``steps`` pre-training steps on the GPU: each step takes the longest of its
    FLOPs at the assumed rate (sequences ``fill`` full on average), the step floor, and the
    host's time to mask the batch."""
    compute = batch_size * seq_len * fill * flops_per_token_ / gpu_flop_s(hidden_size)
    return steps * max(compute, GPU_STEP_FLOOR_S, batch_size / HOST_MASKING_SEQ_PER_S)
