"""Dagster assets and asset checks over checkpoints; thin: the work lives in `checkpoint/` and `jobs/`."""
