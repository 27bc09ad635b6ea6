#!/usr/bin/env python3
"""Merges a GPU check's serving figures into a latest.json (bench/gpu/latest.json's format).

The file is one JSON object: "device" and "date" say where and when the figures were last
measured, every other key is a figure. Keys this run does not produce are kept as they were;
keys it produces are replaced. Usage (scripts/gpu-check.sh: the server stage, and after the
benchmarks):

  write_latest.py OUT.json --device "NVIDIA H100 ..." [--base bench/gpu/latest.json]
      [--server-report bench-server.json] [--server-05b-report bench-server-05b.json]
      [--sessions-report bench-sessions.json] [--sessions-05b-report bench-sessions-05b.json]
      [--sessions-weights-reports bench-sessions-bf16.json bench-sessions-fp8.json]
      [--demo-right 3/3] [--demo-turn2-ttft-ms 12.5] [--sessions-kv-budget-mib 64]
      [--bench-gpu-report bench-gpu.json] [--torch-peer-report torch-peer.json]
      [--eval-report gpu-eval.jsonl ...]

Keys written, from the server stage:
  server_demo_right      "R/N": the demo's questions answered right in one session
  server_turn2_ttft_ms   turn 2's time to first token in that session (KV of turn 1 reused)
  server_c16_over_c1     `framezip bench server`: aggregate decode tok/s at 16 sessions over 1
                         (all-running window where both levels have one, else the turn-2 phase)
  sessions_resident      {policy: {frames: sessions}} from `framezip bench sessions`
  sessions_decode_tok_s  {policy: {frames: tok/s}} from the same run
  sessions_kv_budget_mib the KV budget that run filled
  sessions_05b_same_memory  from two `framezip bench sessions --memory-budget-mib M` runs on the
                         0.5B shape, bf16 then fp8 weights (--sessions-weights-reports):
                         {"memory_budget_mib", "bf16"/"fp8": {"weights_mib", "kv_budget_mib",
                         "sessions_resident": {policy: {frames: sessions}}}}
  fp8_over_bf16_sessions_same_memory_05b  sessions the fp8 run held over the bf16 run's, for the
                         first policy and frame count both measured

From `framezip bench gpu --json` (--bench-gpu-report: bench/gpu/gpu_bench.cc, model_e2e.cc) and
bench/gpu/torch_peer.py (--torch-peer-report), "ours over theirs" (>1: framezip is faster), each
from two rows at the same context and batch (the names below, as both reports spell them):
  e2e_prefill_4k_over_torch_eager     end-to-end prefill of a 4096-token prompt, Qwen2-0.5B shape,
                                      over torch eager (e2e_prefill_4k_over_torch_static: over the
                                      static-cache flash prefill)
  decode_b{1,16,64}_4k_over_torch_graphs  end-to-end decode tokens/s at batch 1/16/64 over a
                                      4096-token context, over torch with a static KV cache and
                                      the step in a CUDA graph (decode_b*_4k_over_torch_eager: over
                                      the eager peer)
  vision_over_torch_eager             SigLIP-so400m (OV) frames/s over torch eager, at the largest
                                      frame count both ran
  prefill_attention_32k_over_sdpa     dense causal prefill attention at T=32768, Qwen2-0.5B heads,
                                      the op's kernel (FlashInfer's prefill where the build has it,
                                      else the project's bf16 tensor-core kernel, pipelined) over
                                      torch SDPA bf16 (prefill_attention_32k_qwen2_7b_heads_over_sdpa:
                                      d128); each kernel's own: prefill_attention_32k_framezip_over_sdpa,
                                      prefill_attention_32k_flashinfer_over_sdpa
Ours alone (framezip bench gpu):
  paged_decode_b16_32k_fraction_of_copy_ceiling  paged decode attention, Qwen2-0.5B heads, batch
                                      16, 32k context, f16 pages, the op's kernel (CUDA cores):
                                      bytes read per second over the device copy ceiling
  paged_decode_b16_32k_flashinfer_fraction_of_copy_ceiling  the same over the same f16 pages
                                      through FlashInfer's paged prefill kernel (one query row)
  int4_over_f16_decode_b16_32k        the same kernel's f16 time over its int4 time (>1: int4 is
                                      faster)
  attentionpack_over_dense_decode_32k AttentionPack's fused decode over 32k visual tokens, f16
                                      factors (the policy's default), speed over dense f16 paged
                                      decode of the same context
  attentionpack_e2e_decode_b1_4k_over_dense  the engine's decode at batch 1 over a 4k prompt whose
                                      3968 visual rows are AttentionPack blocks, tokens/s over the
                                      dense batch-1 row's
  attentionpack_host_syncs_per_decode_step  that AttentionPack step's host synchronisations
  host_syncs_per_decode_step, kernel_launches_per_decode_step, host_device_copies_per_decode_step,
  step_plans_per_decode_step          one end-to-end decode step at batch 16, counted
  fp8_over_bf16_decode_b1_05b, fp8_over_bf16_decode_b1_7b  decode tokens/s at batch 1 after 1024
                                      tokens with FP8 weights (--weight-format fp8) over the same
                                      random weights in bf16, Qwen2-0.5B / Qwen2-7B shape (sm_90)
  fp8_over_bf16_sessions_capacity_05b, fp8_over_bf16_sessions_capacity_7b  sessions of 1024
                                      tokens one memory budget for the decoder's weights and KV
                                      holds with FP8 weights over bf16 (1.5 / 20 GiB; weight bytes
                                      on the GPU and one sequence's KV pages, measured)
From framezip-eval-frames --json reports (--eval-report, repeatable; JSON lines, one per policy,
as scripts/gpu-check.sh's GPU eval writes them):
  eval_top1_agreement                 {policy: teacher-forced top-1 agreement with the reference}
  eval_top1_agreement_min             the lowest of those
A key is computed when every report it reads was given. When one of them was given but a row it
needs is missing (or not finite), or another report it needs was not given, the key is left out,
any old value of it removed (it would pass for this run's), and the reason listed on stderr; keys
none of whose reports were given are kept as they were.
Exit status 1 with a message naming the file when a report cannot be read.
"""
import argparse
import datetime
import json
import re
import sys


def results(path):
    """The {name: value} of a `framezip bench ... --json` report (its last JSON line)."""
    try:
        with open(path) as f:
            lines = [l for l in f.read().splitlines() if l.startswith("{")]
        report = json.loads(lines[-1])
        return {r["name"]: r["value"] for r in report["results"]}
    except (OSError, IndexError, KeyError, ValueError) as e:
        sys.exit(f"write_latest: cannot read a bench report from {path}: {e}")


def eval_reports(paths):
    """[(policy, report)] from framezip-eval-frames --json outputs (JSON lines: one per policy)."""
    reports = []
    for path in paths:
        try:
            with open(path) as f:
                lines = [l for l in f.read().splitlines() if l.startswith("{")]
            reports += [(j.get("policy", "?"), j) for j in map(json.loads, lines)]
        except (OSError, ValueError) as e:
            sys.exit(f"write_latest: cannot read an eval report from {path}: {e}")
    return reports


# framezip bench gpu's rows (bench/gpu/gpu_bench.cc, bench/gpu/model_e2e.cc).
OURS_PREFILL = "end-to-end prefill, Qwen2-0.5B shape bf16, {ctx}-token prompt"
OURS_DECODE = "end-to-end decode batch {batch} at {ctx} context"  # batch > 1: + " (aggregate)"
OURS_VISION = ("end-to-end vision tower, SigLIP-so400m (OV) bf16, 384 px, {frames} frames in "
               "batches of 8")
OURS_PREFILL_ATTENTION = "dense causal prefill attention bf16 tensor cores pipelined {label} T={t}"
FLASHINFER_PREFILL_ATTENTION = "dense causal prefill attention FlashInfer bf16 {label} T={t}"
OURS_PAGED_DECODE = "decode attention {label} batch {batch} ctx {ctx} {format} [cuda cores] {what}"
OURS_ATTENTIONPACK = ("AttentionPack decode, one sequence, ctx {ctx} visual tokens, rank 32 "
                      "{format} factors speed vs dense f16 paged decode [tensor cores]")
OURS_STEP_COUNT = "end-to-end decode batch 16 {what} per step"
OURS_ATTENTIONPACK_E2E = ("end-to-end decode batch 1, attentionpack ({visual} visual tokens in "
                          "blocks), at {ctx} context")
OURS_FP8_DECODE = "FP8 over bf16 decode batch 1 at 1024 context, {label} shape"
OURS_FP8_SESSIONS = ("FP8 over bf16 sessions of 1024 tokens in one memory budget for decoder "
                     "weights and KV, {label} shape")
# torch_peer.py's rows.
from peer_rows import (EAGER_DECODE_ROW, EAGER_PREFILL_ROW, GRAPH_DECODE_ROW, SDPA_ROW,
                       STATIC_PREFILL_ROW, VISION_ROW)
HEADS_05B = "Qwen2-0.5B heads 14/2 d64"
HEADS_7B = "Qwen2-7B heads 28/4 d128"


class Missing(Exception):
    """A key's input is absent: the message says which row of which report."""


class Rows:
    """One report's {name: value}, or None when it was not given; names the file in errors."""

    def __init__(self, flag, path, values):
        self.flag, self.path, self.values = flag, path, values

    def get(self, *names, zero_ok=False):
        """The value of the first of `names` present; Missing if none is, or if it is not a
        finite figure (the C++ bench writes -1 for one), or 0 where a ratio needs more."""
        if self.values is None:
            raise Missing(f"no {self.flag}")
        for name in names:
            if name in self.values:
                v = self.values[name]
                if not isinstance(v, (int, float)) or v < 0 or (v == 0 and not zero_ok):
                    raise Missing(f"{self.path} row '{name}' is {v!r}, not a usable figure")
                return float(v)
        alts = "' or '".join(names)
        raise Missing(f"{self.path} has no row '{alts}'")


def ours_decode(ours, batch, ctx):
    name = OURS_DECODE.format(batch=batch, ctx=ctx)
    return ours.get(name, name + " (aggregate)")


def vision_ratio(ours, peer):
    """Ours over torch eager at the largest frame count both reports have."""
    for r in (ours, peer):
        if r.values is None:
            raise Missing(f"no {r.flag}")
    pattern = re.escape(VISION_ROW).replace(re.escape("{frames}"), r"(\d+)")
    frames = [int(m.group(1)) for m in (re.fullmatch(pattern, n) for n in peer.values) if m]
    both = sorted((f for f in frames if OURS_VISION.format(frames=f) in ours.values), reverse=True)
    if not both:
        raise Missing(f"no frame count with both a '{OURS_VISION}' row in {ours.path} and a "
                      f"'{VISION_ROW}' row in {peer.path}")
    f = both[0]
    return ours.get(OURS_VISION.format(frames=f)) / peer.get(VISION_ROW.format(frames=f))


def gpu_keys():
    """[(key, the reports it reads, fn(ours, peer, evals) -> value)]."""
    keys = []

    def add(key, sources, fn):
        keys.append((key, sources, fn))

    add("e2e_prefill_4k_over_torch_eager", ("gpu", "peer"),
        lambda o, p, e: o.get(OURS_PREFILL.format(ctx=4096)) /
        p.get(EAGER_PREFILL_ROW.format(ctx=4096)))
    add("e2e_prefill_4k_over_torch_static", ("gpu", "peer"),
        lambda o, p, e: o.get(OURS_PREFILL.format(ctx=4096)) /
        p.get(STATIC_PREFILL_ROW.format(ctx=4096)))
    for batch in (1, 16, 64):
        add(f"decode_b{batch}_4k_over_torch_graphs", ("gpu", "peer"),
            lambda o, p, e, b=batch: ours_decode(o, b, 4096) /
            p.get(GRAPH_DECODE_ROW.format(batch=b, ctx=4096)))
        add(f"decode_b{batch}_4k_over_torch_eager", ("gpu", "peer"),
            lambda o, p, e, b=batch: ours_decode(o, b, 4096) /
            p.get(EAGER_DECODE_ROW.format(batch=b, ctx=4096)))
    add("vision_over_torch_eager", ("gpu", "peer"), lambda o, p, e: vision_ratio(o, p))
    for key, label in (("prefill_attention_32k_over_sdpa", HEADS_05B),
                       ("prefill_attention_32k_qwen2_7b_heads_over_sdpa", HEADS_7B)):
        # The op's kernel (ops/attention.h, TensorCoreKernel::kAuto): FlashInfer's where built.
        add(key, ("gpu", "peer"),
            lambda o, p, e, l=label: o.get(FLASHINFER_PREFILL_ATTENTION.format(label=l, t=32768),
                                           OURS_PREFILL_ATTENTION.format(label=l, t=32768)) /
            p.get(SDPA_ROW.format(dtype="bf16", label=l, t=32768)))
    for key, row in (("prefill_attention_32k_framezip_over_sdpa", OURS_PREFILL_ATTENTION),
                     ("prefill_attention_32k_flashinfer_over_sdpa", FLASHINFER_PREFILL_ATTENTION)):
        add(key, ("gpu", "peer"),
            lambda o, p, e, r=row: o.get(r.format(label=HEADS_05B, t=32768)) /
            p.get(SDPA_ROW.format(dtype="bf16", label=HEADS_05B, t=32768)))
    paged = dict(label=HEADS_05B, batch=16, ctx=32768)
    add("paged_decode_b16_32k_fraction_of_copy_ceiling", ("gpu",),
        lambda o, p, e: o.get(OURS_PAGED_DECODE.format(
            **paged, format="f16", what="fraction of copy ceiling")))
    add("paged_decode_b16_32k_flashinfer_fraction_of_copy_ceiling", ("gpu",),
        lambda o, p, e: o.get(OURS_PAGED_DECODE.format(
            **paged, format="f16", what="fraction of copy ceiling").replace(
                "[cuda cores]", "[FlashInfer]")))
    add("int4_over_f16_decode_b16_32k", ("gpu",),
        lambda o, p, e: o.get(OURS_PAGED_DECODE.format(**paged, format="f16", what="time")) /
        o.get(OURS_PAGED_DECODE.format(**paged, format="int4", what="time")))
    add("attentionpack_over_dense_decode_32k", ("gpu",),
        lambda o, p, e: o.get(OURS_ATTENTIONPACK.format(ctx=32768, format="f16")))
    attentionpack_e2e = OURS_ATTENTIONPACK_E2E.format(visual=4096 - 128, ctx=4096)
    add("attentionpack_e2e_decode_b1_4k_over_dense", ("gpu",),
        lambda o, p, e: o.get(attentionpack_e2e) / o.get(OURS_DECODE.format(batch=1, ctx=4096)))
    add("attentionpack_host_syncs_per_decode_step", ("gpu",),
        lambda o, p, e: round(o.get(attentionpack_e2e + " host synchronisations per step",
                                    zero_ok=True)))
    for key, what in (("host_syncs_per_decode_step", "host synchronisations"),
                      ("kernel_launches_per_decode_step", "kernel launches"),
                      ("host_device_copies_per_decode_step", "host-device copies"),
                      ("step_plans_per_decode_step", "step plans")):
        add(key, ("gpu",),
            lambda o, p, e, w=what: round(o.get(OURS_STEP_COUNT.format(what=w), zero_ok=True)))
    for key, label in (("fp8_over_bf16_decode_b1_05b", "Qwen2-0.5B"),
                       ("fp8_over_bf16_decode_b1_7b", "Qwen2-7B")):
        add(key, ("gpu",), lambda o, p, e, l=label: o.get(OURS_FP8_DECODE.format(label=l)))
    for key, label in (("fp8_over_bf16_sessions_capacity_05b", "Qwen2-0.5B"),
                       ("fp8_over_bf16_sessions_capacity_7b", "Qwen2-7B")):
        add(key, ("gpu",), lambda o, p, e, l=label: o.get(OURS_FP8_SESSIONS.format(label=l)))
    add("eval_top1_agreement", ("eval",), lambda o, p, e: eval_agreement(e))
    add("eval_top1_agreement_min", ("eval",), lambda o, p, e: min(eval_agreement(e).values()))
    return keys


def eval_agreement(evals):
    """{policy: top-1 agreement} of the eval reports that measured it."""
    if evals is None:
        raise Missing("no --eval-report")
    top1 = {policy: float(j["agreement"]["top1"]) for policy, j in evals
            if isinstance(j.get("agreement"), dict) and "top1" in j["agreement"]}
    if not top1:
        raise Missing("no eval report with an agreement.top1 (run framezip-eval-frames with "
                      "--reference-device)")
    return top1


def gpu_figures(latest, ours, peer, evals):
    """Computes the keys of gpu_keys() into latest; returns the lines for stderr."""
    given = {"gpu": ours.values is not None, "peer": peer.values is not None,
             "eval": evals is not None}
    notes = []
    for key, sources, fn in gpu_keys():
        if not any(given[s] for s in sources):
            continue  # this run says nothing about it: kept as it was
        try:
            value = fn(ours, peer, evals)
            if isinstance(value, dict):
                latest[key] = {k: float(f"{v:.6g}") for k, v in value.items()}
            else:  # counts stay integers; figures keep 6 significant digits
                latest[key] = value if isinstance(value, int) else float(f"{value:.6g}")
        except Missing as e:
            if key in latest:
                del latest[key]
            notes.append(f"write_latest: left out {key}: {e}")
    return notes


def server_figures(values):
    out = {}
    for window in ("decode_tok_s_all_running_c{}", "decode_tok_s_c{}"):
        c1, c16 = values.get(window.format(1)), values.get(window.format(16))
        if c1 and c16:
            out["server_c16_over_c1"] = c16 / c1
            break
    return out


def server_05b_figures(values):
    """The 0.5B shape's serving figures (random weights: timings only): c16 over c1 as for the
    shipped model, and the turn-1 / turn-2 TTFT p50 at one session in ms."""
    out = {k.replace("server_", "server_05b_", 1): v for k, v in server_figures(values).items()}
    for turn in (1, 2):
        value = values.get(f"turn{turn}_ttft_p50_c1")
        if value is not None:
            out[f"server_05b_turn{turn}_ttft_ms"] = value * 1000.0
    return out


def sessions_figures(values):
    resident, decode = {}, {}
    for name, value in values.items():
        m = re.fullmatch(r"sessions_resident_(.+)_f(\d+)", name)
        if m:
            resident.setdefault(m.group(1), {})[m.group(2)] = int(value)
        m = re.fullmatch(r"decode_tok_s_(.+)_f(\d+)", name)
        if m:
            decode.setdefault(m.group(1), {})[m.group(2)] = value
    out = {}
    if resident:
        out["sessions_resident"] = resident
    if decode:
        out["sessions_decode_tok_s"] = decode
    return out


def weights_sessions_figures(bf16, fp8):
    """The same memory budget with bf16 and with fp8 weights: what each left the KV pool and the
    sessions it held, and the ratio of sessions for the first policy and frame count both ran."""
    same = {"memory_budget_mib": bf16.get("memory_budget_mib")}
    for name, values in (("bf16", bf16), ("fp8", fp8)):
        same[name] = {"weights_mib": values.get("weights_mib"),
                      "kv_budget_mib": values.get("kv_budget_mib"),
                      "sessions_resident": sessions_figures(values).get("sessions_resident", {})}
    out = {"sessions_05b_same_memory": same}
    for policy, by_frames in same["bf16"]["sessions_resident"].items():
        for frames, held in by_frames.items():
            other = same["fp8"]["sessions_resident"].get(policy, {}).get(frames)
            if held and other is not None:
                out["fp8_over_bf16_sessions_same_memory_05b"] = other / held
                return out
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--device", required=True)
    p.add_argument("--base", help="latest.json to start from (default: OUT itself if it exists)")
    p.add_argument("--server-report")
    p.add_argument("--server-05b-report",
                   help="`framezip bench server --json` on the LLaVA-OneVision-0.5B shape")
    p.add_argument("--sessions-report")
    p.add_argument("--sessions-05b-report",
                   help="`framezip bench sessions --json` on the LLaVA-OneVision-0.5B shape")
    p.add_argument("--sessions-weights-reports", nargs=2, metavar=("BF16", "FP8"),
                   help="`framezip bench sessions --memory-budget-mib M --json` on the 0.5B "
                        "shape with --weight-format bf16, then fp8")
    p.add_argument("--demo-right")
    p.add_argument("--demo-turn2-ttft-ms", type=float)
    p.add_argument("--sessions-kv-budget-mib", type=float)
    p.add_argument("--bench-gpu-report", help="`framezip bench gpu --json`'s output")
    p.add_argument("--torch-peer-report", help="bench/gpu/torch_peer.py --out's file")
    p.add_argument("--eval-report", action="append", default=None,
                   help="framezip-eval-frames --json output (JSON lines); repeatable")
    args = p.parse_args()

    latest = {}
    for base in (args.base, args.out):
        if base:
            try:
                with open(base) as f:
                    latest = json.load(f)
                break
            except FileNotFoundError:
                continue
            except ValueError as e:
                sys.exit(f"write_latest: {base} is not a JSON object: {e}")
    if args.demo_right is not None:
        if not re.fullmatch(r"\d+/\d+", args.demo_right):
            sys.exit(f"write_latest: --demo-right must be R/N, got '{args.demo_right}'")
        latest["server_demo_right"] = args.demo_right
    if args.demo_turn2_ttft_ms is not None:
        latest["server_turn2_ttft_ms"] = args.demo_turn2_ttft_ms
    if args.server_report:
        latest.update(server_figures(results(args.server_report)))
    if args.server_05b_report:
        latest.update(server_05b_figures(results(args.server_05b_report)))
    if args.sessions_report:
        latest.update(sessions_figures(results(args.sessions_report)))
        if args.sessions_kv_budget_mib is not None:
            latest["sessions_kv_budget_mib"] = args.sessions_kv_budget_mib
    if args.sessions_05b_report:
        latest.update({k.replace("sessions_", "sessions_05b_", 1): v for k, v in
                       sessions_figures(results(args.sessions_05b_report)).items()})
    if args.sessions_weights_reports:
        latest.pop("fp8_over_bf16_sessions_same_memory_05b", None)  # this run's, or none
        latest.update(weights_sessions_figures(*(results(path)
                                                 for path in args.sessions_weights_reports)))
    ours = Rows("--bench-gpu-report", args.bench_gpu_report,
                results(args.bench_gpu_report) if args.bench_gpu_report else None)
    peer = Rows("--torch-peer-report", args.torch_peer_report,
                results(args.torch_peer_report) if args.torch_peer_report else None)
    evals = eval_reports(args.eval_report) if args.eval_report is not None else None
    for line in gpu_figures(latest, ours, peer, evals):
        print(line, file=sys.stderr)
    latest["device"] = args.device
    latest["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(args.out, "w") as f:
        json.dump(latest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
