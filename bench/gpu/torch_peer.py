#!/usr/bin/env python3
"""PyTorch peer for `framezip bench gpu`: the same shapes through torch, printed as one JSON line.

  * torch.nn.functional.scaled_dot_product_attention, causal, bf16 and f16, at 4k/16k/32k tokens
    for heads 14/2 d64 (Qwen2-0.5B) and 28/4 d128 (Qwen2-7B): TFLOP/s counted as framezip's
    dense prefill figure (2·T²·d·H for causal: QKᵀ and PV, half the matrix);
  * an eager Qwen2-0.5B-shaped decoder in plain torch (random weights; 24 layers, hidden 896,
    14/2 heads, d64, MLP 4864, vocab 151936; RMSNorm, RoPE, GQA through SDPA, SwiGLU): prefill
    tokens/s at 4096 tokens and decode tokens/s at batch 1 and 16 over a 4096-token KV cache;
  * an eager SigLIP-so400m tower as LLaVA-OneVision runs it (26 layers, hidden 1152, 16 heads of
    72, MLP 4304, gelu tanh, 384-px frames of 729 patches, random bf16 weights): frames/s over 32
    frames in batches of 8, host pixels in and the last hidden state back, as framezip's row.

Timing: torch.cuda.Event around each call after warm-up, median of repeats; random inputs.
Usage: python3 bench/gpu/torch_peer.py [--quick] [--out FILE]   (scripts/gpu-check.sh runs it)
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def median_ms(fn, warmup=2, reps=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def sdpa(q, k, v):
    # q [1, H, T, d], k/v [1, G, T, d]: native GQA when this torch has it, else repeat K/V.
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:
        rep = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(
            q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1), is_causal=True)


def bench_sdpa(results, quick):
    shapes = [(14, 2, 64, "Qwen2-0.5B heads 14/2 d64"), (28, 4, 128, "Qwen2-7B heads 28/4 d128")]
    sizes = [4096] if quick else [4096, 16384, 32768]
    for dtype, dname in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
        for heads, kv_heads, d, label in shapes:
            for t in sizes:
                q = torch.randn(1, heads, t, d, device="cuda", dtype=dtype)
                k = torch.randn(1, kv_heads, t, d, device="cuda", dtype=dtype)
                v = torch.randn(1, kv_heads, t, d, device="cuda", dtype=dtype)
                ms = median_ms(lambda: sdpa(q, k, v), 2, 3 if t >= 16384 else 5)
                flops = 2.0 * t * t * d * heads
                results.append({"name": f"torch SDPA causal {dname} {label} T={t}",
                                "value": flops / (ms * 1e-3) / 1e12, "unit": "TFLOP/s"})
                results.append({"name": f"torch SDPA causal {dname} {label} T={t} time",
                                "value": ms, "unit": "ms"})
                print(f"{results[-2]['name']}: {results[-2]['value']:.1f} TFLOP/s ({ms:.2f} ms)",
                      flush=True)
                del q, k, v


class Qwen2Shaped(torch.nn.Module):
    """Qwen2-0.5B's shape in eager torch with random weights (no checkpoint needed)."""

    def __init__(self, layers=24, hidden=896, heads=14, kv_heads=2, head_dim=64, mlp=4864,
                 vocab=151936, theta=1e6):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, head_dim
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            layer = torch.nn.Module()
            layer.ln1 = torch.nn.RMSNorm(hidden, eps=1e-6)
            layer.q = torch.nn.Linear(hidden, heads * head_dim, bias=True)
            layer.k = torch.nn.Linear(hidden, kv_heads * head_dim, bias=True)
            layer.v = torch.nn.Linear(hidden, kv_heads * head_dim, bias=True)
            layer.o = torch.nn.Linear(heads * head_dim, hidden, bias=False)
            layer.ln2 = torch.nn.RMSNorm(hidden, eps=1e-6)
            layer.gate = torch.nn.Linear(hidden, mlp, bias=False)
            layer.up = torch.nn.Linear(hidden, mlp, bias=False)
            layer.down = torch.nn.Linear(mlp, hidden, bias=False)
            self.layers.append(layer)
        self.norm = torch.nn.RMSNorm(hidden, eps=1e-6)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def rope(self, x, pos):
        # x [B, h, T, d]; rotate-half RoPE at integer positions pos [T].
        f = pos.float()[:, None] * self.inv_freq.to(x.device)[None, :]
        cos = torch.cat([f.cos(), f.cos()], -1).to(x.dtype)
        sin = torch.cat([f.sin(), f.sin()], -1).to(x.dtype)
        x1, x2 = x.chunk(2, -1)
        return x * cos + torch.cat([-x2, x1], -1) * sin

    @torch.no_grad()
    def forward(self, ids, cache, start):
        # ids [B, T]; cache: per layer (k, v) [B, G, ctx, d] preallocated; writes [start, start+T).
        b, t = ids.shape
        pos = torch.arange(start, start + t, device=ids.device)
        x = self.embed(ids)
        for layer, (kc, vc) in zip(self.layers, cache):
            h = layer.ln1(x)
            q = layer.q(h).view(b, t, self.heads, self.d).transpose(1, 2)
            k = layer.k(h).view(b, t, self.kv_heads, self.d).transpose(1, 2)
            v = layer.v(h).view(b, t, self.kv_heads, self.d).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            kc[:, :, start:start + t] = k
            vc[:, :, start:start + t] = v
            keys, values = kc[:, :, :start + t], vc[:, :, :start + t]
            rep = self.heads // self.kv_heads
            attn = F.scaled_dot_product_attention(
                q, keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1),
                is_causal=t > 1)
            x = x + layer.o(attn.transpose(1, 2).reshape(b, t, -1))
            h = layer.ln2(x)
            x = x + layer.down(F.silu(layer.gate(h)) * layer.up(h))
        return self.lm_head(self.norm(x[:, -1]))


def bench_decoder(results, quick):
    dtype = torch.bfloat16
    with torch.device("cuda"):  # initialise on the GPU: 0.5B random weights on the CPU take long
        model = Qwen2Shaped().to(dtype).eval()
    ctx = 1024 if quick else 4096

    def cache(batch):
        return [(torch.zeros(batch, 2, ctx + 8, 64, device="cuda", dtype=dtype),
                 torch.zeros(batch, 2, ctx + 8, 64, device="cuda", dtype=dtype))
                for _ in model.layers]

    c1 = cache(1)
    ids = torch.randint(0, 151936, (1, ctx), device="cuda")
    ms = median_ms(lambda: model(ids, c1, 0), 1, 3)
    results.append({"name": f"torch eager Qwen2-0.5B-shaped prefill bf16 T={ctx}",
                    "value": ctx / (ms * 1e-3), "unit": "tokens/s"})
    print(f"{results[-1]['name']}: {results[-1]['value']:.0f} tokens/s", flush=True)
    for batch in (1, 16):
        cb = cache(batch)
        for layer_k, layer_v in cb:  # a filled cache: random, not zeros
            layer_k.normal_()
            layer_v.normal_()
        step = torch.randint(0, 151936, (batch, 1), device="cuda")
        ms = median_ms(lambda: model(step, cb, ctx), 3, 10)
        name = f"torch eager Qwen2-0.5B-shaped decode bf16 batch {batch} ctx {ctx}"
        results.append({"name": name, "value": batch / (ms * 1e-3), "unit": "tokens/s"})
        print(f"{results[-1]['name']}: {results[-1]['value']:.0f} tokens/s", flush=True)


class SiglipShaped(torch.nn.Module):
    """SigLIP-so400m's tower (OV's 26 layers) in eager torch with random weights."""

    def __init__(self, layers=26, hidden=1152, heads=16, mlp=4304, patch=14, image=384):
        super().__init__()
        self.heads, self.patch = heads, patch
        grid = image // patch
        self.patch_embed = torch.nn.Conv2d(3, hidden, patch, stride=patch)
        self.pos = torch.nn.Parameter(torch.randn(grid * grid, hidden) * 0.02)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            layer = torch.nn.Module()
            layer.ln1 = torch.nn.LayerNorm(hidden, eps=1e-6)
            layer.qkv = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(3))
            layer.out = torch.nn.Linear(hidden, hidden)
            layer.ln2 = torch.nn.LayerNorm(hidden, eps=1e-6)
            layer.fc1 = torch.nn.Linear(hidden, mlp)
            layer.fc2 = torch.nn.Linear(mlp, hidden)
            self.layers.append(layer)

    @torch.no_grad()
    def forward(self, pixels):
        # pixels [B, 3, 384, 384] -> last hidden state [B, 729, hidden] (no post-LN, as OV).
        x = self.patch_embed(pixels).flatten(2).transpose(1, 2) + self.pos
        b, t, hidden = x.shape
        for layer in self.layers:
            h = layer.ln1(x)
            q, k, v = (p(h).view(b, t, self.heads, -1).transpose(1, 2) for p in layer.qkv)
            attn = F.scaled_dot_product_attention(q, k, v)
            x = x + layer.out(attn.transpose(1, 2).reshape(b, t, hidden))
            x = x + layer.fc2(F.gelu(layer.fc1(layer.ln2(x)), approximate="tanh"))
        return x


def bench_vision(results, quick):
    dtype = torch.bfloat16
    with torch.device("cuda"):
        model = SiglipShaped().to(dtype).eval()
    frames = 8 if quick else 32
    pixels = torch.randn(frames, 3, 384, 384).pin_memory()

    def run():
        for b in range(0, frames, 8):
            batch = pixels[b:b + 8].to("cuda", non_blocking=True).to(dtype)
            model(batch).float().cpu()

    ms = median_ms(run, 1, 3)
    results.append({"name": f"torch eager SigLIP-so400m (OV) bf16, 384 px, {frames} frames in "
                            "batches of 8",
                    "value": frames / (ms * 1e-3), "unit": "frames/s"})
    print(f"{results[-1]['name']}: {results[-1]['value']:.1f} frames/s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="4k SDPA and a 1k-token model only")
    ap.add_argument("--out", help="also write the JSON object to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_peer: no CUDA device visible to torch", file=sys.stderr)
        return 2
    torch.manual_seed(int(time.time()))
    results = []
    bench_sdpa(results, args.quick)
    bench_decoder(results, args.quick)
    bench_vision(results, args.quick)
    report = {"suite": "gpu-torch-peer",
              "machine": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "results": results}
    line = json.dumps(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
