"""The run system: a run is a folder that one process writes and anyone reads (docs/DESIGN.md).

``run`` (the folder and its status), ``lock`` (file locks, the writer lock, live processes),
``background`` (a run's process: start, kill, delete), ``signals`` (Ctrl-C and SIGTERM as a Stop),
``gpu_queue`` (one training at a time on a GPU), ``finder`` (the runs under a folder, their labels and
checkpoints) and ``report`` (what a person reads about a run: durations, key numbers, log tails). Used
by pre-training, fine-tuning, ablations and the nearest-neighbour build alike (``neighbour_jobs``: an
index built in the background, which is not a run: a work folder with a progress file, kept under the
disk cache); nothing here imports streamlit or torch.
"""
