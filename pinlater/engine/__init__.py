"""The job service's internals: the core over the shards, writes, settling, admin and reads.

Nothing outside `pinlater` imports these (tests/unit/test_layers.py)."""
