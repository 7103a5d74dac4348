"""weights: checkpoints read strictly and lazily (safetensors, bf16, FP8, the index), the tensor table, the hub's ranged fetch into irsurgeon's cache. Imports core/ only."""
