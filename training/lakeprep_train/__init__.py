"""lakeprep's reference trainer: reads a lakeprep manifest and trains on its shards.

    torchrun --nproc-per-node N -m lakeprep_train.train --manifest M --output DIR

The manifest (docs/MANIFEST.md) is the only input. Nothing heavy is imported here, so
``python -m lakeprep_train.manifest check`` starts without loading torch.
"""
