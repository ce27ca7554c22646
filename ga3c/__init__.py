"""ga3c: GA3C, NVIDIA's hybrid CPU/GPU A3C trainer, in PyTorch."""

__version__ = "0.1.0"
