#!/usr/bin/env python3
"""PyTorch peer for `framezip bench gpu`: the same shapes through torch, printed as one JSON line.

  * torch.nn.functional.scaled_dot_product_attention, causal, bf16 and f16, at 4k/16k/32k tokens
    for heads 14/2 d64 (Qwen2-0.5B) and 28/4 d128 (Qwen2-7B): TFLOP/s counted as framezip's
    dense prefill figure (2·T²·d·H for causal: QKᵀ and PV, half the matrix);
  * a Qwen2-0.5B-shaped decoder in plain torch (random weights; 24 layers, hidden 896, 14/2
    heads, d64, MLP 4864, vocab 151936; RMSNorm, RoPE, GQA, SwiGLU), run two ways over the same
    weights:
      - eager (the weak peer): a per-layer cache slice, K/V repeated to every query head, one
        Python call a step: prefill tokens/s at 4096 tokens, decode tokens/s at batch 1, 16 and
        64 over a 4096-token cache;
      - static-cache + CUDA graph (the strong peer): one preallocated KV cache written in place
        (index_copy_, no torch.cat, no per-step cache rebuild), SDPA with native GQA on the flash
        backend where it applies (torch.nn.attention.sdpa_kernel), RoPE from a precomputed table,
        and the whole decode step (embedding, 24 layers, head, greedy argmax into the next step's
        input) captured once as a torch.cuda.CUDAGraph with static input/output buffers and
        replayed; each step's ids come back to the host, as a server streams them (framezip's
        end-to-end decode rows read the sampled ids back too). Decode tokens/s at batch 1, 16
        and 64 over a 4096-token context, and a static-cache prefill at 4096 tokens. The graph
        attends over a key length fixed when it is captured (the context + the new token: flash
        SDPA takes no per-sequence lengths), so it is captured per context, as a server would
        per length bucket;
    the row names say their context ("ctx N", "T=N"), as framezip's do ("at N context");
  * an eager SigLIP-so400m tower as LLaVA-OneVision runs it (26 layers, hidden 1152, 16 heads of
    72, MLP 4304, gelu tanh, 384-px frames of 729 patches, random bf16 weights): frames/s over 32
    frames in batches of 8, host pixels in and the last hidden state back, as framezip's row.

Timing: torch.cuda.Event around each call after warm-up, median of repeats; random inputs.
Before timing the graphs, the tiny self-check below runs on the GPU too (graph replay included):
a mismatch drops the graph rows and fails the run. A section that fails is reported on stderr
and leaves the others' rows; the exit status is then 1. --out is rewritten after every section,
so a run stopped by a timeout still leaves what it measured.

Usage: python3 bench/gpu/torch_peer.py [--quick] [--out FILE]   (scripts/gpu-check.sh runs it)
       python3 bench/gpu/torch_peer.py --self-check [--device cpu|cuda]
  --quick: 4k SDPA, a 1k-token model (decode over a 1024-token context), 8 frames.
  --self-check: no timing. Tiny shapes in f32 (default on the CPU, no GPU needed): the static-
    cache decoder's logits (prefill, then graph-less decode steps) against the eager decoder's
    and against a cache-free full recompute; on CUDA also each CUDA-graph replay against them.
    Exits 1 on a mismatch.
Without a CUDA device (and without --self-check) it exits 2 at once with a message.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# Row names, shared with write_latest.py.
from peer_rows import (EAGER_DECODE_ROW, EAGER_PREFILL_ROW, GRAPH_DECODE_ROW, SDPA_ROW,
                       STATIC_PREFILL_ROW, VISION_ROW)
DECODE_BATCHES = (1, 16, 64)


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
                results.append({"name": SDPA_ROW.format(dtype=dname, label=label, t=t),
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


class StaticKvDecoder:
    """Qwen2Shaped's weights run over one preallocated KV cache, written in place.

    The cache is [layers, batch, kv_heads, capacity, head_dim] for K and for V, allocated once:
    a step writes its new rows with index_copy_ at positions held in a device tensor (so a CUDA
    graph can capture it) and attends over a view of the first `length` positions; nothing is
    concatenated or rebuilt per step. RoPE reads cos/sin from tables computed once, in the same
    arithmetic as the eager decoder's rope() (f32 angles, cast to the model's dtype). Attention is
    SDPA with native GQA (enable_gqa: no K/V repeated per query head) under `backends`.
    """

    def __init__(self, model, batch, capacity, backends):
        p = model.embed.weight
        shape = (len(model.layers), batch, model.kv_heads, capacity, model.d)
        self.model, self.batch, self.capacity, self.backends = model, batch, capacity, backends
        self.k = torch.zeros(shape, device=p.device, dtype=p.dtype)
        self.v = torch.zeros(shape, device=p.device, dtype=p.dtype)
        f = (torch.arange(capacity, device=p.device).float()[:, None] *
             model.inv_freq.to(p.device)[None, :])
        self.cos = torch.cat([f.cos(), f.cos()], -1).to(p.dtype)  # [capacity, d]
        self.sin = torch.cat([f.sin(), f.sin()], -1).to(p.dtype)

    def fill_random(self):
        """A filled cache for timing decode: random rows, not zeros."""
        self.k.normal_()
        self.v.normal_()

    @torch.no_grad()
    def forward(self, ids, pos, length):
        """ids [B, T] at positions pos (a device tensor [T]); attends over [0, length).

        T > 1 is a prefill from position 0 (causal, length == T); T == 1 a decode step whose
        position is length - 1. Returns the last position's logits [B, vocab].
        """
        m = self.model
        b, t = ids.shape
        if t > 1 and length != t:
            raise ValueError(f"a {t}-token prefill must start at 0 (length {length})")
        cos, sin = self.cos[pos], self.sin[pos]  # [T, d], broadcast over batch and heads

        def rope(x):
            x1, x2 = x.chunk(2, -1)
            return x * cos + torch.cat([-x2, x1], -1) * sin

        x = m.embed(ids)
        for i, layer in enumerate(m.layers):
            h = layer.ln1(x)
            q = layer.q(h).view(b, t, m.heads, m.d).transpose(1, 2)
            k = layer.k(h).view(b, t, m.kv_heads, m.d).transpose(1, 2)
            v = layer.v(h).view(b, t, m.kv_heads, m.d).transpose(1, 2)
            q, k = rope(q), rope(k)
            self.k[i].index_copy_(2, pos, k)
            self.v[i].index_copy_(2, pos, v)
            with sdpa_kernel(self.backends):
                attn = F.scaled_dot_product_attention(
                    q, self.k[i, :, :, :length], self.v[i, :, :, :length], is_causal=t > 1,
                    enable_gqa=True)
            x = x + layer.o(attn.transpose(1, 2).reshape(b, t, -1))
            h = layer.ln2(x)
            x = x + layer.down(F.silu(layer.gate(h)) * layer.up(h))
        return m.lm_head(m.norm(x[:, -1]))

    def prefill(self, ids):
        t = ids.shape[1]
        return self.forward(ids, torch.arange(t, device=ids.device), t)

    def step(self, ids, position):
        """One graph-less decode step of ids [B, 1] at `position` (a Python int)."""
        pos = torch.full((1,), position, device=ids.device, dtype=torch.long)
        return self.forward(ids, pos, position + 1)


class GraphDecodeStep:
    """One decode step of a StaticKvDecoder at a fixed position, captured as a CUDA graph.

    Static buffers: `ids` [B, 1] (the step's input; the step's argmax writes the next step's ids
    back into it, so replays feed themselves), `logits` [B, vocab] and `next_ids` [B] (the
    outputs). Warmed up on a side stream before capture, as torch.cuda.graph requires. With
    capture=False (the CPU self-check) replay() runs the same step eagerly into the same buffers.
    """

    def __init__(self, decoder, position, capture=True):
        dev = decoder.k.device
        self.decoder, self.position, self.graph = decoder, position, None
        self.ids = torch.zeros(decoder.batch, 1, device=dev, dtype=torch.long)
        self.pos = torch.full((1,), position, device=dev, dtype=torch.long)
        if not capture:
            self.logits, self.next_ids = None, None
            return
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits, self.next_ids = self._step()

    def _step(self):
        logits = self.decoder.forward(self.ids, self.pos, self.position + 1)
        next_ids = logits.argmax(-1)
        self.ids.copy_(next_ids[:, None])
        return logits, next_ids

    def replay(self):
        if self.graph is None:
            self.logits, self.next_ids = self._step()
        else:
            self.graph.replay()


def attention_backends(device, dtype):
    """[FLASH_ATTENTION] when flash SDPA runs this dtype with GQA at prefill and decode shapes
    here, else every backend (torch picks); and a word for the notes."""
    q1 = torch.randn(1, 14, 1, 64, device=device, dtype=dtype)
    qt = torch.randn(1, 14, 8, 64, device=device, dtype=dtype)
    kv = torch.randn(1, 2, 8, 64, device=device, dtype=dtype)
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            F.scaled_dot_product_attention(q1, kv, kv, enable_gqa=True)
            F.scaled_dot_product_attention(qt, kv, kv, is_causal=True, enable_gqa=True)
        return [SDPBackend.FLASH_ATTENTION], "flash"
    except Exception as e:  # RuntimeError "No available kernel" where flash does not apply
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return ([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
                f"torch's choice (flash does not apply: {first})")


def self_check(device, log=print):
    """The static-cache decoder against the eager one on tiny f32 shapes; returns the largest
    logit difference seen. Raises AssertionError on a mismatch.

    Teacher-forced: a random prompt, then random step tokens, through (1) the eager decoder with
    its cache, (2) a cache-free recompute of the whole sequence per step (eager, from position 0),
    (3) the static-cache decoder's graph-less steps, and on CUDA (4) one CUDA graph per step
    position, replayed. Random RMSNorm weights and biases, so no part is an identity.
    """
    with torch.random.fork_rng(devices=[0] if device == "cuda" else []):
        torch.manual_seed(1234)
        return _self_check(device, log)


def _self_check(device, log):
    dtype = torch.float32
    with torch.device(device):
        model = Qwen2Shaped(layers=3, hidden=64, heads=4, kv_heads=2, head_dim=16, mlp=96,
                            vocab=101, theta=1e4).to(dtype).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.normal_(1.0 if "ln" in name or "norm" in name else 0.0, 0.2)
    batch, prompt, steps = 3, 11, 5
    capacity = prompt + steps
    ids = torch.randint(0, 101, (batch, prompt), device=device)
    step_ids = torch.randint(0, 101, (steps, batch, 1), device=device)
    backends, backend_note = attention_backends(device, dtype)

    def eager_cache():
        return [(torch.zeros(batch, 2, capacity, 16, device=device, dtype=dtype),
                 torch.zeros(batch, 2, capacity, 16, device=device, dtype=dtype))
                for _ in model.layers]

    cache = eager_cache()
    eager = [model(ids, cache, 0)] + [model(step_ids[i], cache, prompt + i) for i in range(steps)]
    full = [ids] + [torch.cat([ids, step_ids[:i + 1, :, 0].T], 1) for i in range(steps)]
    recompute = [model(seq, eager_cache(), 0) for seq in full]
    dec = StaticKvDecoder(model, batch, capacity, backends)
    static = [dec.prefill(ids)] + [dec.step(step_ids[i], prompt + i) for i in range(steps)]

    worst = 0.0

    def same(a, b, what):
        nonlocal worst
        diff = (a - b).abs().max().item()
        bound = 1e-4 * max(1.0, b.abs().max().item())
        worst = max(worst, diff)
        assert diff <= bound, f"{what}: max |logit difference| {diff:.3g} > {bound:.3g}"

    for i in range(steps + 1):
        what = "prefill" if i == 0 else f"decode step {i}"
        same(eager[i], recompute[i], f"eager cache vs full recompute, {what}")
        same(static[i], eager[i], f"static cache vs eager, {what}")
    # A fresh cache from the static prefill on, then the step a graph captures, one per
    # position: captured and replayed on CUDA, run eagerly into the same buffers on the CPU.
    capture = device == "cuda"
    dec = StaticKvDecoder(model, batch, capacity, backends)
    dec.prefill(ids)
    kind = "CUDA-graph replays" if capture else "uncaptured graph steps"
    for i in range(steps):
        g = GraphDecodeStep(dec, prompt + i, capture=capture)
        g.ids.copy_(step_ids[i])
        g.replay()
        if capture:
            torch.cuda.synchronize()
        same(g.logits, eager[i + 1], f"{kind}: step {i + 1} vs eager")
        assert torch.equal(g.next_ids, g.logits.argmax(-1)), f"{kind}: argmax"
        assert torch.equal(g.ids[:, 0], g.next_ids), f"{kind}: next ids fed back"
    checked = f"eager cache vs recompute; static graph-less steps and {kind} vs eager"
    log(f"torch_peer self-check on {device} (f32, attention {backend_note}): {checked}: "
        f"max |logit difference| {worst:.3g}: ok")
    return worst


def qwen2_on_gpu(dtype):
    with torch.device("cuda"):  # initialise on the GPU: 0.5B random weights on the CPU take long
        return Qwen2Shaped().to(dtype).eval()


def bench_static_decoder(results, quick, notes):
    """The strong peer: static KV cache, flash SDPA, the decode step in a CUDA graph."""
    dtype = torch.bfloat16
    # The graphs' correctness first, on this GPU (tiny shapes, a second or two): a failure raises
    # and leaves no graph rows.
    diff = self_check("cuda")
    results.append({"name": "torch static-cache CUDA-graph peer self-check on the GPU (f32, tiny "
                            "shapes): max |logit difference| vs eager", "value": diff,
                    "unit": "abs"})
    model = qwen2_on_gpu(dtype)
    ctx = 1024 if quick else 4096
    backends, backend_note = attention_backends("cuda", dtype)
    notes.append(f"static-cache peer: SDPA backend {backend_note}")
    steps = 8 if quick else 32
    dec = StaticKvDecoder(model, 1, ctx + 8, backends)
    ids = torch.randint(0, 151936, (1, ctx), device="cuda")
    ms = median_ms(lambda: dec.prefill(ids), 1, 3)
    results.append({"name": STATIC_PREFILL_ROW.format(ctx=ctx), "value": ctx / (ms * 1e-3),
                    "unit": "tokens/s"})
    print(f"{results[-1]['name']}: {results[-1]['value']:.0f} tokens/s", flush=True)
    del dec
    for batch in DECODE_BATCHES:
        dec = StaticKvDecoder(model, batch, ctx + 8, backends)
        dec.fill_random()
        graph = GraphDecodeStep(dec, ctx)  # attends over ctx cached tokens + the new one
        graph.ids.random_(0, 151936)

        def run():
            for _ in range(steps):
                graph.replay()
                graph.next_ids.cpu()  # the ids to the host each step, as a server streams them

        ms = median_ms(run, 1, 5)
        results.append({"name": GRAPH_DECODE_ROW.format(batch=batch, ctx=ctx),
                        "value": batch * steps / (ms * 1e-3), "unit": "tokens/s"})
        print(f"{results[-1]['name']}: {results[-1]['value']:.0f} tokens/s", flush=True)
        del graph, dec
        torch.cuda.empty_cache()


def bench_eager_decoder(results, quick, notes):
    """The eager peer (row names as before; batch 64 added)."""
    dtype = torch.bfloat16
    model = qwen2_on_gpu(dtype)
    ctx = 1024 if quick else 4096
    ids = torch.randint(0, 151936, (1, ctx), device="cuda")

    def cache(batch):
        return [(torch.zeros(batch, 2, ctx + 8, 64, device="cuda", dtype=dtype),
                 torch.zeros(batch, 2, ctx + 8, 64, device="cuda", dtype=dtype))
                for _ in model.layers]

    c1 = cache(1)
    ms = median_ms(lambda: model(ids, c1, 0), 1, 3)
    results.append({"name": EAGER_PREFILL_ROW.format(ctx=ctx), "value": ctx / (ms * 1e-3),
                    "unit": "tokens/s"})
    print(f"{results[-1]['name']}: {results[-1]['value']:.0f} tokens/s", flush=True)
    del c1
    for batch in DECODE_BATCHES:
        cb = cache(batch)
        for layer_k, layer_v in cb:  # a filled cache: random, not zeros
            layer_k.normal_()
            layer_v.normal_()
        step = torch.randint(0, 151936, (batch, 1), device="cuda")
        ms = median_ms(lambda: model(step, cb, ctx), 3, 10)
        results.append({"name": EAGER_DECODE_ROW.format(batch=batch, ctx=ctx),
                        "value": batch / (ms * 1e-3), "unit": "tokens/s"})
        print(f"{results[-1]['name']}: {results[-1]['value']:.0f} tokens/s", flush=True)
        del cb
        torch.cuda.empty_cache()


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
    results.append({"name": VISION_ROW.format(frames=frames),
                    "value": frames / (ms * 1e-3), "unit": "frames/s"})
    print(f"{results[-1]['name']}: {results[-1]['value']:.1f} frames/s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="4k SDPA, a 1k-token model (decode over 1024 tokens), 8 frames")
    ap.add_argument("--out", help="also write the JSON object to this file (after each section)")
    ap.add_argument("--self-check", action="store_true",
                    help="no timing: the static-cache decoder (and on CUDA its graphs) against "
                         "the eager one on tiny f32 shapes")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where --self-check runs (default cpu)")
    args = ap.parse_args()
    if args.self_check:
        if args.device == "cuda" and not torch.cuda.is_available():
            print("torch_peer: --self-check --device cuda: no CUDA device visible to torch",
                  file=sys.stderr)
            return 2
        try:
            self_check(args.device)
        except AssertionError as e:
            print(f"torch_peer: self-check FAILED: {e}", file=sys.stderr)
            return 1
        return 0
    if not torch.cuda.is_available():
        print("torch_peer: no CUDA device visible to torch (torch "
              f"{torch.__version__}, CUDA build {torch.version.cuda}); nothing timed. "
              "--self-check runs on the CPU.", file=sys.stderr)
        return 2
    torch.manual_seed(int(time.time()))
    results, notes, failed = [], [], []
    report = {"suite": "gpu-torch-peer",
              "machine": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__},
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "notes": "", "results": results}

    def write():
        report["notes"] = "; ".join(notes + [f"FAILED: {s}" for s in failed])
        line = json.dumps(report)
        if args.out:  # whole or not at all, should a timeout stop it mid-write
            with open(args.out + ".tmp", "w") as f:
                f.write(line + "\n")
            os.replace(args.out + ".tmp", args.out)
        return line

    for name, section in (("SDPA", bench_sdpa),
                          ("static-cache CUDA-graph decoder", bench_static_decoder),
                          ("eager decoder", bench_eager_decoder), ("vision", bench_vision)):
        try:
            if section in (bench_static_decoder, bench_eager_decoder):
                section(results, args.quick, notes)
            else:
                section(results, args.quick)
        except Exception as e:  # one section's failure leaves the others' rows
            traceback.print_exc()
            print(f"torch_peer: the {name} section failed: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
            failed.append(f"{name} section ({type(e).__name__})")
            torch.cuda.empty_cache()
        write()
    print(write())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
