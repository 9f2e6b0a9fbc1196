"""The model definitions the recorded workloads share (one place for each, so two scripts that
say they train "the MLP of docs/h200-measurements.md" build exactly the same modules).

Each function builds its modules in the order, with the arguments and on the device the
scripts that use it built them before this module existed, so the parameters (under the same
seed), the allocations and every figure a run writes are unchanged; only the Python line that
allocates a parameter is now one of this file's.
"""

import torch.nn as nn


def mlp(width, depth, act, device):
    """`depth` x (Linear(width, width) + act()), as one Sequential on `device`."""
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), act()]
    return nn.Sequential(*layers).to(device)


def encoder(layers, device, d=512, heads=8, ff=2048, dropout=0.0, nested=False):
    """A TransformerEncoder of `layers` batch-first layers on `device`."""
    layer = nn.TransformerEncoderLayer(
        d_model=d, nhead=heads, dim_feedforward=ff, batch_first=True, dropout=dropout
    )
    return nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=nested).to(device)


def encoder_lm(vocab, d, ff, dropout, layers, device):
    """A token embedding, an 8-head encoder and a vocabulary head, built in that order on
    `device`: (embedding, encoder, head)."""
    emb = nn.Embedding(vocab, d).to(device)
    enc = encoder(layers, device, d=d, heads=8, ff=ff, dropout=dropout, nested=True)
    head = nn.Linear(d, vocab).to(device)
    return emb, enc, head
