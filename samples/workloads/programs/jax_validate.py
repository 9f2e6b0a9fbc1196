#!/usr/bin/env python3
"""JAX workloads for the BFC validation (docs/validation.md, "Part 3"). Run one under each of
XLA's allocators in turn: the default BFC (75% preallocated), XLA_PYTHON_CLIENT_PREALLOCATE=false
(BFC with allow_growth), and XLA_PYTHON_CLIENT_ALLOCATOR=platform under `vramtrace record
--requests` (one driver allocation per buffer: the request stream a BFC replay needs).

    python3 jax_validate.py WORKLOAD OUT.json

Writes jax.devices()[0].memory_stats() (XLA's own counters: bytes_in_use, peak_bytes_in_use,
pool_bytes, peak_pool_bytes, bytes_reserved, num_allocs, largest_alloc_size, bytes_limit) and
the environment to OUT.json.

Workloads: mlp (jax_train.py's MLP, SGD, 20 jitted steps), varshape (an MLP trained on batches
of six sizes in turn: one executable per size, buffers of every size live across steps).
"""
import json
import os
import sys

import jax
import jax.numpy as jnp


def init(key, sizes):
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (a, b)) * 0.02, jnp.zeros(b)))
    return key, params


def loss(params, x):
    for w, b in params:
        x = jax.nn.gelu(x @ w + b)
    return jnp.mean(x**2)


@jax.jit
def step(params, x):
    g = jax.grad(loss)(params, x)
    return [(w - 1e-3 * gw, b - 1e-3 * gb) for (w, b), (gw, gb) in zip(params, g)]


def mlp():
    key, params = init(jax.random.PRNGKey(0), [1024, 2048, 2048, 1024])
    for _ in range(20):
        key, k = jax.random.split(key)
        params = step(params, jax.random.normal(k, (512, 1024)))
    return params


def varshape():
    key, params = init(jax.random.PRNGKey(1), [1024, 4096, 4096, 1024])
    kept = []
    for i in range(18):
        key, k = jax.random.split(key)
        batch = [256, 2048, 512, 4096, 128, 1024][i % 6]
        x = jax.random.normal(k, (batch, 1024))
        params = step(params, x)
        kept = (kept + [x])[-3:]  # the last three batches stay live
    return params, kept


def main():
    workload, out = sys.argv[1], sys.argv[2]
    result = {"mlp": mlp, "varshape": varshape}[workload]()
    jax.block_until_ready(result)
    stats = jax.devices()[0].memory_stats() or {}
    truth = {
        "workload": workload,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "TF_CPP"))},
        "memory_stats": stats,
        "jax": jax.__version__,
        "device": str(jax.devices()[0].device_kind),
    }
    with open(out, "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
    print(json.dumps(truth), flush=True)


if __name__ == "__main__":
    main()
