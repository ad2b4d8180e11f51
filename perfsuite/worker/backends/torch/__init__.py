"""PyTorch backend: input pipelines per data location, the training step, distribution."""
