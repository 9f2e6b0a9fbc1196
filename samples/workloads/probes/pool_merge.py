#!/usr/bin/env python3
"""Which free ranges of CUDA's stream-ordered pool merge, and when, under PyTorch's
backend:cudaMallocAsync (issue 24: docs/validation.md, "The pool's placement, read off its real
addresses"). One case per process, so the default pool starts empty.

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python3 pool_merge.py CASE OUT.json

Every case fills the pool's first 32 MiB with four 8 MiB blocks a, b, c, d on the default
stream, frees some, then asks for 16 MiB (or 8 MiB) and reports where it landed ("a" = at a's
address: a and b merged; "new" = the pool grew) and the pool's reserved bytes
(`memory_reserved`: ReservedMemCurrent). "busy" = the stream kept running ~0.2 s by
torch.cuda._sleep, so a free made then is not complete on the GPU when the request comes.

  pend_pend        busy; free a, free b; ask 16: do two incomplete frees of one stream merge?
  done_pend_busy   free a; synchronize; busy; free b; ask 16: does an incomplete free merge
                   with a completed neighbour?
  done_pend_synced the same with a synchronize before the request (control: merged)
  done_pend_waited the same as done_pend_busy, but the host sleeps 0.4 s before the request (the
                   GPU has passed the free by then; no host synchronization)
  done_pend_idle   free a; synchronize; free b (GPU idle); host sleeps 0.3 s; ask 16: does GPU
                   progress alone, without a host synchronization, let them merge?
  tier_busy        free a; synchronize; busy; free c; ask 8: a completed free or the stream's
                   incomplete one (frees since the last synchronization first)?
  tier_idle        free a; synchronize; free c (GPU idle); host sleeps 0.3 s; ask 8: the same
                   once the GPU has passed the free without a synchronization
"""
import json
import sys
import time

import torch

MiB = 1 << 20
SPIN = 400_000_000  # cycles of torch.cuda._sleep: about 0.2 s on an H200


def block(mib):
    return torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")


def busy():
    torch.cuda._sleep(SPIN)


def main():
    case, out = sys.argv[1], sys.argv[2]
    blocks = {n: block(8) for n in "abcd"}
    spans = {n: (x.data_ptr(), x.numel()) for n, x in blocks.items()}
    torch.cuda.synchronize()
    ask = 16
    if case == "pend_pend":
        busy()
        del blocks["a"], blocks["b"]
    elif case in ("done_pend_busy", "done_pend_synced", "done_pend_waited"):
        del blocks["a"]
        torch.cuda.synchronize()
        busy()
        del blocks["b"]
        if case == "done_pend_synced":
            torch.cuda.synchronize()
        if case == "done_pend_waited":
            time.sleep(0.4)
    elif case == "done_pend_idle":
        del blocks["a"]
        torch.cuda.synchronize()
        del blocks["b"]
        time.sleep(0.3)
    elif case in ("tier_busy", "tier_idle"):
        ask = 8
        del blocks["a"]
        torch.cuda.synchronize()
        if case == "tier_busy":
            busy()
        del blocks["c"]
        if case == "tier_idle":
            time.sleep(0.3)
    else:
        sys.exit(f"pool_merge.py: unknown case {case}")
    reserved_before = torch.cuda.memory_reserved()
    x = block(ask)
    p = x.data_ptr()
    at = next((n for n, (a, size) in spans.items() if a <= p < a + size), "new")
    torch.cuda.synchronize()
    result = {
        "case": case,
        "ask_mib": ask,
        "landed": at,
        "offset_mib": (p - spans["a"][0]) / MiB,
        "reserved_before": reserved_before,
        "reserved_after": torch.cuda.memory_reserved(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "blocks": {n: a - spans["a"][0] for n, (a, _) in spans.items()},
    }
    json.dump(result, open(out, "w"), indent=1)
    print(json.dumps(result))


main()
