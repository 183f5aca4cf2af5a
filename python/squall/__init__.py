"""squall: containers for distributed training on Slurm."""

__version__ = "0.1.0"
