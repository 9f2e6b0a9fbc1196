"""A small PyTorch training loop for the wheel check on the GPU machine (wheel_h200.sh).

python wheel_train.py [STEPS]: an MLP of four 4096-wide layers, batch 256, AdamW, on cuda:0.
"""

import sys

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
model = torch.nn.Sequential(
    *[m for _ in range(4) for m in (torch.nn.Linear(4096, 4096), torch.nn.GELU())]
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(steps):
    x = torch.randn(256, 4096, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print(f"steps {steps} loss {loss.item():.4f} max_allocated {torch.cuda.max_memory_allocated()}")
