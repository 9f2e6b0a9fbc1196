#!/usr/bin/env python3
"""Seven seeded PyTorch workloads for the replay validation of issue 16 (docs/validation.md,
"Part 3"), each run under whatever PYTORCH_CUDA_ALLOC_CONF selects.

    python3 validation_workloads.py WORKLOAD OUTDIR NAME

Writes OUTDIR/NAME.truth.json: the allocator's own figures of this process
(torch.cuda.memory_stats(), max_memory_reserved/allocated, the back-end, versions, the device).
Under the native back-end (with or without expandable segments) it also turns on PyTorch's
memory history before the first CUDA allocation and writes OUTDIR/NAME.requests.csv.gz (every
trace entry: action,addr,size,stream,time_us, the format of replay_validate.py and
analyzer/examples/import_torch_trace.rs) and OUTDIR/NAME.pickle (the memory snapshot, for
`vramtrace import`). Under backend:cudaMallocAsync (what `vramtrace record --requests` selects)
PyTorch refuses a memory history; the recorder's trace is the request stream then.

Workloads:
  generate_kv     Llama-style decoder, bf16, greedy generation with a KV cache grown by
                  torch.cat every token (sizes grow every step), three prompts of different length
  side_stream     MLP training whose batches are made on a side stream and handed over with
                  record_stream; torch.cuda.empty_cache() every fourth step
  amp_vit         ViT (torchvision vit_b_16 at 160 px), fp16 autocast + GradScaler, AdamW
  multires_cnn    ResNet-18 at six input resolutions in turn, SGD with momentum
  varbatch_infer  transformer encoder inference (no_grad, fp16) at random batch x length
  lstm_varlen     two-layer LSTM over packed sequences of random lengths, training
  transformer     the TransformerEncoder loop of torch_train.py (the -4.5% native case of
                  docs/validation.md)
"""
import json
import os
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_truth  # noqa: E402

BACKEND = torch.cuda.get_allocator_backend()
HISTORY = BACKEND == "native"
if HISTORY:
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")


class Decoder(nn.Module):
    def __init__(self, vocab=8192, d=1024, layers=8, heads=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    ln1=nn.LayerNorm(d),
                    qkv=nn.Linear(d, 3 * d, bias=False),
                    o=nn.Linear(d, d, bias=False),
                    ln2=nn.LayerNorm(d),
                    up=nn.Linear(d, 4 * d, bias=False),
                    down=nn.Linear(4 * d, d, bias=False),
                )
            )
            for _ in range(layers)
        )
        self.head = nn.Linear(d, vocab, bias=False)
        self.h = heads

    def forward(self, tokens, cache):
        x = self.emb(tokens)
        b, t, d = x.shape
        for i, l in enumerate(self.layers):
            q, k, v = l["qkv"](l["ln1"](x)).view(b, t, 3, self.h, d // self.h).unbind(2)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=cache[i][0].shape[2] == t)
            x = x + l["o"](a.transpose(1, 2).reshape(b, t, d))
            x = x + l["down"](F.gelu(l["up"](l["ln2"](x))))
        return self.head(x[:, -1])


def generate_kv():
    torch.manual_seed(0)
    model = Decoder().to(dev, torch.bfloat16).eval()
    with torch.no_grad():
        for prompt, new in [(96, 160), (300, 120), (40, 200)]:
            tokens = torch.randint(0, 8192, (8, prompt), device=dev)
            cache = [None] * len(model.layers)
            nxt = model(tokens, cache).argmax(-1, keepdim=True)
            out = [nxt]
            for _ in range(new - 1):
                nxt = model(nxt, cache).argmax(-1, keepdim=True)
                out.append(nxt)
            del cache, out, nxt, tokens


def side_stream():
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(2048, 2048), nn.GELU())]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    side = torch.cuda.Stream()
    host = [torch.randn(512, 2048).pin_memory() for _ in range(3)]
    for step in range(24):
        with torch.cuda.stream(side):
            x = host[step % 3].to(dev, non_blocking=True)
            x = x * 0.5 + 0.1
            noise = torch.randn(512, 2048, device=dev)
            x = x + noise
            del noise
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, loss
        if step % 4 == 3:
            torch.cuda.empty_cache()


def amp_vit():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.vit_b_16(weights=None, image_size=160).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(10):
        x = torch.randn(32, 3, 160, 160, device=dev)
        y = torch.randint(0, 1000, (32,), device=dev)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def multires_cnn():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(12):
        r = [128, 224, 160, 288, 192, 256][step % 6]
        x = torch.randn(32, 3, r, r, device=dev)
        y = torch.randint(0, 1000, (32,), device=dev)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def varbatch_infer():
    torch.manual_seed(0)
    rng = random.Random(3)
    enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, batch_first=True), 6,
        enable_nested_tensor=False,
    ).to(dev, torch.float16).eval()
    with torch.no_grad():
        for _ in range(40):
            b, t = rng.choice([1, 4, 8, 16, 32]), rng.randrange(16, 512)
            y = enc(torch.randn(b, t, 768, device=dev, dtype=torch.float16))
            del y


def lstm_varlen():
    torch.manual_seed(0)
    rng = random.Random(4)
    lstm = nn.LSTM(256, 512, num_layers=2, batch_first=True).to(dev)
    head = nn.Linear(512, 10).to(dev)
    opt = torch.optim.Adam(list(lstm.parameters()) + list(head.parameters()), lr=1e-3)
    for _ in range(20):
        lengths = sorted((rng.randrange(8, 200) for _ in range(64)), reverse=True)
        x = torch.randn(64, lengths[0], 256, device=dev)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        _, (h, _) = lstm(packed)
        loss = F.cross_entropy(head(h[-1]), torch.randint(0, 10, (64,), device=dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def transformer():
    import torch_train

    torch.manual_seed(0)
    for _ in torch_train.transformer_steps():
        pass


WORKLOADS = {
    f.__name__: f
    for f in (generate_kv, side_stream, amp_vit, multires_cnn, varbatch_infer, lstm_varlen, transformer)
}


def main():
    workload, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    start = time.time()
    WORKLOADS[workload]()
    torch.cuda.synchronize()
    seconds = time.time() - start
    entries = 0
    if HISTORY:
        entries = torch_truth.write_history(os.path.join(out, name + ".requests.csv.gz"))
        torch.cuda.memory._dump_snapshot(os.path.join(out, name + ".pickle"))
    truth = {
        "workload": workload,
        "name": name,
        "allocator_backend": BACKEND,
        "cuda_launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING", ""),
        "seconds": seconds,
        "trace_entries": entries,
        **torch_truth.figures(),
    }
    with open(os.path.join(out, name + ".truth.json"), "w") as f:
        json.dump(truth, f, indent=1, sort_keys=True)
    s = truth["memory_stats"]
    print(
        f"{name}: {seconds:.1f}s backend={BACKEND} reserved_peak={truth['max_memory_reserved']}"
        f" allocated_peak={truth['max_memory_allocated']} device_alloc={s.get('num_device_alloc')}"
        f" device_free={s.get('num_device_free')}",
        flush=True,
    )


if __name__ == "__main__":
    main()
