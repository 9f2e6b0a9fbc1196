"""A small JAX training loop (MLP, SGD, 20 jitted steps) for recorder validation.

    python jax_train.py TRUTH.json

Run it under XLA_PYTHON_CLIENT_PREALLOCATE / XLA_PYTHON_CLIENT_ALLOCATOR variants; it writes the
device's memory_stats() (XLA's own counters) to TRUTH.json.
"""

import json
import os
import sys

import jax
import jax.numpy as jnp


def main():
    key = jax.random.PRNGKey(0)
    sizes = [1024, 2048, 2048, 1024]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (a, b)) * 0.02, jnp.zeros(b)))

    def loss(params, x):
        for w, b in params:
            x = jax.nn.gelu(x @ w + b)
        return jnp.mean(x**2)

    @jax.jit
    def step(params, x):
        g = jax.grad(loss)(params, x)
        return [(w - 1e-3 * gw, b - 1e-3 * gb) for (w, b), (gw, gb) in zip(params, g)]

    for i in range(20):
        key, k = jax.random.split(key)
        params = step(params, jax.random.normal(k, (512, 1024)))
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
