#!/usr/bin/env python3
"""Tests of bench/gpu/write_latest.py, the GPU check's latest.json writer.

Run: /usr/bin/python3 tests/tools/test_write_latest.py. Prints one line per check and "N passed,
M failed"; exits 1 on a failure.

Checked: keys from a previous latest.json survive a merge, device and date are replaced, the
bench reports' figures land under the keys the GPU check promises (server_c16_over_c1 from the
all-running window, sessions_resident and sessions_decode_tok_s per policy and frame count, FP8
over bf16 weights' sessions in one memory budget), and
a missing report or a malformed --demo-right fails with a message naming it.

The GPU keys, from the synthetic reports in tests/data/gpu_reports/ (shaped as `framezip bench
gpu --json`, torch_peer.py --out and framezip-eval-frames --json write them): each ratio against
the two rows it names, recomputed here from the files; decode compared at the same context and
batch only (batch 16 at 4096, not the 1024-context row beside it); a key whose row is missing
(decode at batch 64 on our side) or not finite left out, its stale value removed and the key
named on stderr; keys of reports not given kept; the eval minimum over the policies that
measured agreement. And both scripts take the peer's row names from bench/gpu/peer_rows.py (read from
its source: no torch needed).
"""

import ast
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRITER = os.path.join(ROOT, "bench", "gpu", "write_latest.py")

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    print(f"{'ok  ' if ok else 'FAIL'} {name}{'' if ok else ': ' + detail}")
    passed, failed = passed + ok, failed + (not ok)


def report(path, suite, results):
    with open(path, "w") as f:
        f.write("readable line: 1 x\n")
        f.write(json.dumps({"suite": suite, "machine": {},
                            "results": [{"name": n, "value": v, "unit": "u"}
                                        for n, v in results.items()]}) + "\n")


def run(*args):
    return subprocess.run([sys.executable, WRITER, *args], capture_output=True, text=True)


with tempfile.TemporaryDirectory() as d:
    base = os.path.join(d, "base.json")
    with open(base, "w") as f:
        json.dump({"device": "old", "date": "2000-01-01T00:00:00Z", "bench_gpu_x": 7}, f)
    server = os.path.join(d, "server.json")
    report(server, "server", {"decode_tok_s_c1": 10.0, "decode_tok_s_c16": 90.0,
                              "decode_tok_s_all_running_c1": 12.0,
                              "decode_tok_s_all_running_c16": 96.0})
    server_05b = os.path.join(d, "server-05b.json")
    report(server_05b, "server", {"decode_tok_s_c1": 20.0, "decode_tok_s_c16": 200.0,
                                  "turn1_ttft_p50_c1": 0.5, "turn2_ttft_p50_c1": 0.025})
    sessions = os.path.join(d, "sessions.json")
    report(sessions, "sessions", {"sessions_resident_none_f64": 12.0,
                                  "sessions_resident_kivi_f64": 36.0,
                                  "sessions_resident_none_f256": 3.0,
                                  "decode_tok_s_kivi_f64": 4.5,
                                  "turn2_ttft_p99_kivi_f64": 0.1})
    sessions_05b = os.path.join(d, "sessions-05b.json")
    report(sessions_05b, "sessions", {"sessions_resident_none_f64": 27.0,
                                      "sessions_resident_zipvl_f64": 110.0,
                                      "decode_tok_s_zipvl_f64": 800.0})
    weights = {}
    for fmt, weights_mib, held in (("bf16", 1800.0, 10.0), ("fp8", 1450.0, 15.0)):
        weights[fmt] = os.path.join(d, f"sessions-{fmt}.json")
        report(weights[fmt], "sessions", {"memory_budget_mib": 2560.0, "weights_mib": weights_mib,
                                          "kv_budget_mib": 2560.0 - weights_mib,
                                          "sessions_resident_none_f16": held})
    out = os.path.join(d, "latest.json")
    r = run(out, "--device", "NVIDIA H100", "--base", base, "--server-report", server,
            "--server-05b-report", server_05b, "--sessions-05b-report", sessions_05b,
            "--sessions-report", sessions, "--demo-right", "3/3", "--demo-turn2-ttft-ms", "4.5",
            "--sessions-kv-budget-mib", "64",
            "--sessions-weights-reports", weights["bf16"], weights["fp8"])
    check("writes latest.json", r.returncode == 0, r.stderr)
    j = json.load(open(out)) if r.returncode == 0 else {}
    check("keeps the base's other keys", j.get("bench_gpu_x") == 7, str(j))
    check("replaces device", j.get("device") == "NVIDIA H100", str(j.get("device")))
    check("replaces date", j.get("date", "2000").startswith("20") and
          not j.get("date", "").startswith("2000"), str(j.get("date")))
    check("c16 over c1 from the all-running window", abs(j.get("server_c16_over_c1", 0) - 8.0)
          < 1e-9, str(j.get("server_c16_over_c1")))
    check("the 0.5B shape's figures under their own keys",
          abs(j.get("server_05b_c16_over_c1", 0) - 10.0) < 1e-9 and
          abs(j.get("server_05b_turn1_ttft_ms", 0) - 500.0) < 1e-9 and
          abs(j.get("server_05b_turn2_ttft_ms", 0) - 25.0) < 1e-9, str(j))
    check("the 0.5B shape's sessions under their own keys",
          j.get("sessions_05b_resident") == {"none": {"64": 27}, "zipvl": {"64": 110}} and
          j.get("sessions_05b_decode_tok_s") == {"zipvl": {"64": 800.0}} and
          j.get("sessions_resident", {}).get("kivi") == {"64": 36}, str(j))
    check("demo figures", j.get("server_demo_right") == "3/3" and
          j.get("server_turn2_ttft_ms") == 4.5, str(j))
    check("sessions_resident per policy and frames",
          j.get("sessions_resident") == {"none": {"64": 12, "256": 3}, "kivi": {"64": 36}},
          str(j.get("sessions_resident")))
    check("sessions_decode_tok_s per policy and frames",
          j.get("sessions_decode_tok_s") == {"kivi": {"64": 4.5}},
          str(j.get("sessions_decode_tok_s")))
    check("sessions budget", j.get("sessions_kv_budget_mib") == 64, str(j))
    same = j.get("sessions_05b_same_memory", {})
    check("bf16 and fp8 weights in one memory budget",
          same.get("memory_budget_mib") == 2560.0 and
          same.get("fp8", {}).get("kv_budget_mib") == 1110.0 and
          same.get("bf16", {}).get("sessions_resident") == {"none": {"16": 10}} and
          abs(j.get("fp8_over_bf16_sessions_same_memory_05b", 0) - 1.5) < 1e-9, str(same))

    # A second run merges over the file it wrote: keys it does not produce stay.
    r = run(out, "--device", "NVIDIA H200", "--demo-right", "2/3")
    j = json.load(open(out)) if r.returncode == 0 else {}
    check("merges over OUT", j.get("server_demo_right") == "2/3" and
          j.get("sessions_resident", {}).get("kivi") == {"64": 36} and
          j.get("device") == "NVIDIA H200", str(j))

    r = run(out, "--device", "x", "--server-report", os.path.join(d, "missing.json"))
    check("a missing report names the file", r.returncode != 0 and "missing.json" in r.stderr,
          r.stderr)
    r = run(out, "--device", "x", "--demo-right", "three")
    check("a malformed --demo-right is refused", r.returncode != 0 and "--demo-right" in r.stderr,
          r.stderr)


DATA = os.path.join(ROOT, "tests", "data", "gpu_reports")
GPU, PEER, EVAL = (os.path.join(DATA, n) for n in ("bench-gpu.json", "torch-peer.json",
                                                    "gpu-eval.jsonl"))


def rows(path):
    with open(path) as f:
        return {r["name"]: r["value"]
                for r in json.loads([l for l in f if l.startswith("{")][-1])["results"]}


def near(a, b):
    return a is not None and b is not None and abs(a - b) <= 1e-5 * abs(b)


ours, peer = rows(GPU), rows(PEER)
H = "Qwen2-0.5B heads 14/2 d64"
want = {
    "e2e_prefill_4k_over_torch_eager":
        ours["end-to-end prefill, Qwen2-0.5B shape bf16, 4096-token prompt"] /
        peer["torch eager Qwen2-0.5B-shaped prefill bf16 T=4096"],
    "e2e_prefill_4k_over_torch_static":
        ours["end-to-end prefill, Qwen2-0.5B shape bf16, 4096-token prompt"] /
        peer["torch static-cache Qwen2-0.5B-shaped prefill bf16 T=4096"],
    "decode_b1_4k_over_torch_graphs":
        ours["end-to-end decode batch 1 at 4096 context"] /
        peer["torch static-cache CUDA-graph Qwen2-0.5B-shaped decode bf16 batch 1 ctx 4096"],
    "decode_b16_4k_over_torch_graphs":
        ours["end-to-end decode batch 16 at 4096 context (aggregate)"] /
        peer["torch static-cache CUDA-graph Qwen2-0.5B-shaped decode bf16 batch 16 ctx 4096"],
    "decode_b16_4k_over_torch_eager":
        ours["end-to-end decode batch 16 at 4096 context (aggregate)"] /
        peer["torch eager Qwen2-0.5B-shaped decode bf16 batch 16 ctx 4096"],
    "vision_over_torch_eager":
        ours["end-to-end vision tower, SigLIP-so400m (OV) bf16, 384 px, 32 frames in batches of 8"] /
        peer["torch eager SigLIP-so400m (OV) bf16, 384 px, 32 frames in batches of 8"],
    # The op's kernel: FlashInfer's where the report has its row (d64 here), else the project's
    # (d128 here).
    "prefill_attention_32k_over_sdpa":
        ours[f"dense causal prefill attention FlashInfer bf16 {H} T=32768"] /
        peer[f"torch SDPA causal bf16 {H} T=32768"],
    "prefill_attention_32k_qwen2_7b_heads_over_sdpa":
        ours["dense causal prefill attention bf16 tensor cores pipelined Qwen2-7B heads 28/4 d128 "
             "T=32768"] / peer["torch SDPA causal bf16 Qwen2-7B heads 28/4 d128 T=32768"],
    "prefill_attention_32k_framezip_over_sdpa":
        ours[f"dense causal prefill attention bf16 tensor cores pipelined {H} T=32768"] /
        peer[f"torch SDPA causal bf16 {H} T=32768"],
    "prefill_attention_32k_flashinfer_over_sdpa":
        ours[f"dense causal prefill attention FlashInfer bf16 {H} T=32768"] /
        peer[f"torch SDPA causal bf16 {H} T=32768"],
    "paged_decode_b16_32k_fraction_of_copy_ceiling":
        ours[f"decode attention {H} batch 16 ctx 32768 f16 [cuda cores] fraction of copy ceiling"],
    "paged_decode_b16_32k_flashinfer_fraction_of_copy_ceiling":
        ours[f"decode attention {H} batch 16 ctx 32768 f16 [FlashInfer] fraction of copy ceiling"],
    "int4_over_f16_decode_b16_32k":
        ours[f"decode attention {H} batch 16 ctx 32768 f16 [cuda cores] time"] /
        ours[f"decode attention {H} batch 16 ctx 32768 int4 [cuda cores] time"],
    "attentionpack_over_dense_decode_32k":
        ours["AttentionPack decode, one sequence, ctx 32768 visual tokens, rank 32 f16 factors "
             "speed vs dense f16 paged decode [tensor cores]"],
    "host_syncs_per_decode_step":
        ours["end-to-end decode batch 16 host synchronisations per step"],
    "attentionpack_e2e_decode_b1_4k_over_dense":
        ours["end-to-end decode batch 1, attentionpack (3968 visual tokens in blocks), at 4096 "
             "context"] / ours["end-to-end decode batch 1 at 4096 context"],
    "attentionpack_host_syncs_per_decode_step":
        ours["end-to-end decode batch 1, attentionpack (3968 visual tokens in blocks), at 4096 "
             "context host synchronisations per step"],
    "kernel_launches_per_decode_step": ours["end-to-end decode batch 16 kernel launches per step"],
    "step_plans_per_decode_step": ours["end-to-end decode batch 16 step plans per step"],
    "fp8_over_bf16_decode_b1_05b":
        ours["FP8 over bf16 decode batch 1 at 1024 context, Qwen2-0.5B shape"],
    "fp8_over_bf16_decode_b1_7b":
        ours["FP8 over bf16 decode batch 1 at 1024 context, Qwen2-7B shape"],
    "fp8_over_bf16_sessions_capacity_05b":
        ours["FP8 over bf16 sessions of 1024 tokens in one memory budget for decoder weights and "
             "KV, Qwen2-0.5B shape"],
    "fp8_over_bf16_sessions_capacity_7b":
        ours["FP8 over bf16 sessions of 1024 tokens in one memory budget for decoder weights and "
             "KV, Qwen2-7B shape"],
}
with open(EVAL) as f:
    evals = [json.loads(l) for l in f if l.startswith("{")]
want_top1 = {j["policy"]: j["agreement"]["top1"] for j in evals if "agreement" in j}

with tempfile.TemporaryDirectory() as d:
    base = os.path.join(d, "base.json")
    stale = {"device": "old", "date": "2000-01-01T00:00:00Z", "server_demo_right": "3/3",
             "decode_b64_4k_over_torch_graphs": 9.9, "eval_top1_agreement_min": 0.5}
    with open(base, "w") as f:
        json.dump(stale, f)
    out = os.path.join(d, "latest.json")
    r = run(out, "--device", "NVIDIA H200", "--base", base, "--bench-gpu-report", GPU,
            "--torch-peer-report", PEER, "--eval-report", EVAL)
    check("GPU reports: writes latest.json", r.returncode == 0, r.stderr)
    j = json.load(open(out)) if r.returncode == 0 else {}
    for key, value in want.items():
        check(f"GPU key {key}", near(j.get(key), value), f"{j.get(key)} != {value}")
    check("decode batch 16 compared at 4096 context, not with the 1024-context row",
          not near(j.get("decode_b16_4k_over_torch_graphs"),
                   ours["end-to-end decode batch 16 at 1024 context (aggregate)"] /
                   peer["torch static-cache CUDA-graph Qwen2-0.5B-shaped decode bf16 batch 16 "
                        "ctx 4096"]), str(j.get("decode_b16_4k_over_torch_graphs")))
    check("a key whose row is missing is left out and its stale value removed",
          "decode_b64_4k_over_torch_graphs" not in j and "decode_b64_4k_over_torch_eager" not in j,
          str(j))
    check("stderr names the left-out key and the row it lacks",
          "decode_b64_4k_over_torch_graphs" in r.stderr and
          "end-to-end decode batch 64 at 4096 context" in r.stderr, r.stderr)
    check("eval top-1 agreement per policy that measured it",
          j.get("eval_top1_agreement") == want_top1, str(j.get("eval_top1_agreement")))
    check("eval top-1 agreement minimum", near(j.get("eval_top1_agreement_min"),
                                               min(want_top1.values())), str(j))
    check("the server stage's keys are kept", j.get("server_demo_right") == "3/3", str(j))
    check("device replaced", j.get("device") == "NVIDIA H200", str(j.get("device")))

    # Only our report: keys that need the peer are left out (not kept from an older run), keys
    # of reports not given (the eval's) are kept.
    r = run(out, "--device", "NVIDIA H200", "--bench-gpu-report", GPU)
    j = json.load(open(out)) if r.returncode == 0 else {}
    check("without the peer, its ratios are removed, not kept stale",
          r.returncode == 0 and "vision_over_torch_eager" not in j and
          "--torch-peer-report" in r.stderr, r.stderr)
    check("without the peer, ours-only keys are still written",
          near(j.get("host_syncs_per_decode_step"), want["host_syncs_per_decode_step"]), str(j))
    check("keys of reports not given are kept",
          near(j.get("eval_top1_agreement_min"), min(want_top1.values())), str(j))

    # A non-finite figure (written as -1 by the C++ bench) is not a figure.
    with open(GPU) as f:
        report = json.loads(f.read().splitlines()[-1])
    for row in report["results"]:
        if row["name"] == "end-to-end decode batch 1 at 4096 context":
            row["value"] = -1
    broken = os.path.join(d, "bench-gpu-nonfinite.json")
    with open(broken, "w") as f:
        f.write(json.dumps(report) + "\n")
    r = run(out, "--device", "x", "--bench-gpu-report", broken, "--torch-peer-report", PEER)
    j = json.load(open(out)) if r.returncode == 0 else {}
    check("a non-finite row leaves its key out",
          r.returncode == 0 and "decode_b1_4k_over_torch_graphs" not in j and
          "decode_b1_4k_over_torch_graphs" in r.stderr, r.stderr)
    r = run(out, "--device", "x", "--torch-peer-report", os.path.join(d, "nope.json"))
    check("a missing peer report names the file", r.returncode != 0 and "nope.json" in r.stderr,
          r.stderr)


# The peer's row names live in one module that both scripts import (read from the sources:
# torch_peer.py imports torch, this test must not).
def constants(path):
    tree = ast.parse(open(path).read())
    return {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
            for t in n.targets if isinstance(t, ast.Name) and t.id.endswith("_ROW")
            and isinstance(n.value, ast.Constant)}


def imported_rows(path):
    tree = ast.parse(open(path).read())
    return {a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "peer_rows"
            for a in n.names}


row_names = constants(os.path.join(ROOT, "bench", "gpu", "peer_rows.py"))
check("peer_rows.py names the peer's rows", len(row_names) >= 6, str(row_names))
for script in ("torch_peer.py", "write_latest.py"):
    path = os.path.join(ROOT, "bench", "gpu", script)
    check(f"{script} takes every row name from peer_rows.py and defines none itself",
          imported_rows(path) == set(row_names) and not constants(path),
          f"imports {sorted(imported_rows(path))}, defines {sorted(constants(path))}")

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
