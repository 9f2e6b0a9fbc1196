"""A small JAX training loop (MLP, SGD, 20 jitted steps) for recorder validation.

    python jax_train.py TRUTH.json

Run it under XLA_PYTHON_CLIENT_PREALLOCATE / XLA_PYTHON_CLIENT_ALLOCATOR variants; it writes the
device's memory_stats() (XLA's own counters) to TRUTH.json.
"""

import json
import os
import sys

import jax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jax_validate  # noqa: E402  (the same MLP: jax_validate.py's `mlp`)


def main():
    params = jax_validate.mlp()
    jax.block_until_ready(params)
    stats = jax.devices()[0].memory_stats() or {}
    truth = {
        "env": {k: v for k, v in os.environ.items() if k.startswith("XLA_PYTHON_CLIENT")},
        "memory_stats": stats,
        "jax": jax.__version__,
    }
    with open(sys.argv[1], "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
    print(json.dumps(truth))


if __name__ == "__main__":
    main()
