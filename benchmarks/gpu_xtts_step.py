"""XTTS v2's decode step on a lent GPU through PyTorch: time and memory against batch size.

The lent machine has PyTorch and no coqui-tts, transformers or ONNX Runtime for CUDA, so
this builds a stand-in of the same shape as the exported GPT (XTTS v2: 30 GPT-2 blocks,
1024 wide, 16 heads, 4096 MLP, 1026 codes; random weights: the compute does not depend on
them) and runs one decode step (one new position per generation) over a batch-first cache
of ``--positions`` (XTTS's longest: 32 latents + 404 text + 605 codes), as the xtts model's
cache pool passes it. It measures what the slot count should be chosen by on a GPU node:
milliseconds a step and audio seconds per second (a code is 1024 samples at 22.05 kHz)
per batch size, FP32 and FP16, and the peak memory. Writes JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn

SECONDS_PER_CODE = 1024 / 22050


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, h: torch.Tensor, past: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = h.shape
        q, k, v = self.qkv(self.ln_1(h)).split(d, dim=2)
        q, k, v = (x.reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for x in (q, k, v))
        keys, values = torch.cat([past[:, 0], k], dim=2), torch.cat([past[:, 1], v], dim=2)
        out = nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        h = h + self.proj(out.transpose(1, 2).reshape(b, s, d))
        out_h: torch.Tensor = h + self.mlp(self.ln_2(h))
        return out_h


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--codes", type=int, default=1026)
    parser.add_argument("--positions", type=int, default=1041)
    parser.add_argument("--batches", default="1,2,4,8,16,32")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("results/gpu_xtts_step.json"))
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    results = []
    for dtype in (torch.float32, torch.float16):
        blocks = (
            nn.ModuleList(Block(args.dim, args.heads) for _ in range(args.layers)).to(device, dtype).eval()
        )
        head = nn.Linear(args.dim, args.codes).to(device, dtype)
        for batch in (int(b) for b in args.batches.split(",")):
            hd = args.dim // args.heads
            past = torch.randn(
                batch, args.layers, 2, args.heads, args.positions, hd, device=device, dtype=dtype
            )
            mask = torch.zeros(batch, 1, 1, args.positions + 1, device=device, dtype=torch.bool)
            mask[..., : args.positions // 2] = True  # half the slot filled
            mask[..., -1] = True
            h = torch.randn(batch, 1, args.dim, device=device, dtype=dtype)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            with torch.no_grad():
                for i in range(args.steps + 5):
                    if i == 5:
                        if device.type == "cuda":
                            torch.cuda.synchronize()
                        start = time.perf_counter()
                    x = h
                    for layer, block in enumerate(blocks):
                        x = block(x, past[:, layer], mask)
                    head(x[:, -1]).argmax(-1)
                if device.type == "cuda":
                    torch.cuda.synchronize()
            step_ms = (time.perf_counter() - start) / args.steps * 1000
            peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
            row = {
                "dtype": str(dtype).removeprefix("torch."),
                "batch": batch,
                "step_ms": round(step_ms, 3),
                "audio_s_per_s": round(batch * SECONDS_PER_CODE / (step_ms / 1000), 2),
                "peak_mib": None if peak is None else round(peak, 1),
                "cache_mib": round(past.numel() * past.element_size() / 2**20, 1),
            }
            print(json.dumps(row), flush=True)
            results.append(row)
            del past
    args.out.parent.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    args.out.write_text(json.dumps({"device": device_name, "args": vars(args) | {"out": str(args.out)},
                                    "results": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
