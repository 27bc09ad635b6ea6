#!/usr/bin/env python3
"""framezip's CPU engine beside llama.cpp on the same model shape, in one run.

llama.cpp comes from PyPI: llama-cpp-python builds the llama.cpp it vendors, with its own CPU
feature detection; `gguf` (llama.cpp's own writer) writes a GGUF of Qwen2-0.5B's shape (hidden 896,
24 layers, 14/2 heads of 64, MLP 4864, vocabulary 151936, q/k/v biases, tied head, RoPE θ 1e6) with
random F16 weights, so neither side needs a download. framezip runs the same shape with random
bf16 weights (`framezip bench engine`). The two engines are alternated round by round and the
ratios are medians over rounds.

Figures (tokens/s): prefill of 512 and 2048 tokens, decode batch 1 after a 512-token and after a
2048-token prompt, the depth-512 decode with 4-bit KV: llama.cpp's q4_0 cache (flash attention)
next to framezip's KIVI int4 pages (policy kivi4); decode of 16 sequences together (llama.cpp
through its low-level batch API, one seq_id each in a unified KV cache); and one 384×384 frame
through a SigLIP-so400m vision tower (frames/s): llama.cpp's clip (libmtmd) on an mmproj GGUF that
gguf writes with random F16 weights (26 layers as LLaVA-OneVision uses, 729 patches, 16 heads of
72, MLP 4304, and LLaVA's two-layer projector to 896, which adds ~0.4 % of the FLOPs), next to
`framezip bench engine`'s vision_tower_ms_per_frame (the same 26-layer tower, bf16 weights).

Weight formats (--formats): f16 is llama.cpp's F16 GGUF beside framezip's bf16 weights; q8_0 is
that GGUF quantised by llama.cpp itself (llama_model_quantize, Q8_0: blocks of 32 int8 with an
f16 scale; its AMX or VNNI kernels where the CPU has them, and the activations quantised to Q8
blocks too) beside framezip's `--weight-format int8` (per-channel int8 projections and head,
activations per row; AMX-INT8 / AVX512-VNNI / AVX2). The vision frame, not quantised on either
side, is timed with f16 only.

Usage:
  scripts: python3 -m venv .venv-peers && .venv-peers/bin/pip install -r bench/peers/requirements.txt
  .venv-peers/bin/python bench/peers/llama_cpp_peer.py --framezip build/bin/framezip --rounds 2
Prints one line per measurement and a final JSON object.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 896, 24, 14, 2, 64, 4864, 151936
# SigLIP-so400m at 384×384 as LLaVA-OneVision runs it: 26 of its 27 layers.
V_IMAGE, V_PATCH, V_HIDDEN, V_LAYERS, V_HEADS, V_INTER = 384, 14, 1152, 26, 16, 4304


def write_gguf(path: str, seed: int = 7) -> None:
    """A Qwen2-0.5B-shaped GGUF with random F16 weights and a placeholder vocabulary."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_name("framezip-peer-qwen2-0.5b-shape")
    w.add_context_length(32768)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # Token ids are fed directly, so the vocabulary only has to exist with the right size.
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"<t{i}>" for i in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    w.add_token_merges(["<t2> <t3>"])  # llama.cpp requires a non-empty merge list
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def t(name, shape, std=0.02, mean=0.0, dtype=np.float16):
        w.add_tensor(name, (mean + std * rng.standard_normal(shape, dtype=np.float32)).astype(dtype))

    t("token_embd.weight", (VOCAB, HIDDEN))
    t("output_norm.weight", (HIDDEN,), 0.02, 1.0, np.float32)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", (HIDDEN,), 0.02, 1.0, np.float32)
        t(p + "attn_q.weight", (q, HIDDEN))
        t(p + "attn_q.bias", (q,), dtype=np.float32)
        t(p + "attn_k.weight", (kv, HIDDEN))
        t(p + "attn_k.bias", (kv,), dtype=np.float32)
        t(p + "attn_v.weight", (kv, HIDDEN))
        t(p + "attn_v.bias", (kv,), dtype=np.float32)
        t(p + "attn_output.weight", (HIDDEN, q))
        t(p + "ffn_norm.weight", (HIDDEN,), 0.02, 1.0, np.float32)
        t(p + "ffn_gate.weight", (INTER, HIDDEN))
        t(p + "ffn_up.weight", (INTER, HIDDEN))
        t(p + "ffn_down.weight", (HIDDEN, INTER))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mmproj(path: str, seed: int = 11) -> None:
    """A SigLIP-so400m mmproj GGUF (llama.cpp's clip: projector type "mlp", the LLaVA graph) with
    random F16 weights, projecting to the Qwen2-0.5B width."""
    import gguf

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "clip")
    w.add_name("framezip-peer-siglip-so400m-shape")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", V_IMAGE)
    w.add_uint32("clip.vision.patch_size", V_PATCH)
    w.add_uint32("clip.vision.embedding_length", V_HIDDEN)
    w.add_uint32("clip.vision.feed_forward_length", V_INTER)
    w.add_uint32("clip.vision.projection_dim", HIDDEN)
    w.add_uint32("clip.vision.block_count", V_LAYERS)
    w.add_uint32("clip.vision.attention.head_count", V_HEADS)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    # The last layer's output, as LLaVA-OneVision takes it (the LLaVA graph's default is the
    # second to last).
    w.add_array("clip.vision.feature_layer", [V_LAYERS])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    def t(name, shape, std=0.02, mean=0.0, dtype=np.float16):
        w.add_tensor(name, (mean + std * rng.standard_normal(shape, dtype=np.float32)).astype(dtype))

    patches = (V_IMAGE // V_PATCH) ** 2
    t("v.patch_embd.weight", (V_HIDDEN, 3, V_PATCH, V_PATCH))
    t("v.patch_embd.bias", (V_HIDDEN,), dtype=np.float32)
    t("v.position_embd.weight", (patches, V_HIDDEN), dtype=np.float32)
    for i in range(V_LAYERS):
        p = f"v.blk.{i}."
        for ln in ("ln1", "ln2"):
            t(p + ln + ".weight", (V_HIDDEN,), 0.02, 1.0, np.float32)
            t(p + ln + ".bias", (V_HIDDEN,), dtype=np.float32)
        for proj in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t(p + proj + ".weight", (V_HIDDEN, V_HIDDEN))
            t(p + proj + ".bias", (V_HIDDEN,), dtype=np.float32)
        t(p + "ffn_up.weight", (V_INTER, V_HIDDEN))
        t(p + "ffn_up.bias", (V_INTER,), dtype=np.float32)
        t(p + "ffn_down.weight", (V_HIDDEN, V_INTER))
        t(p + "ffn_down.bias", (V_HIDDEN,), dtype=np.float32)
    t("mm.0.weight", (HIDDEN, V_HIDDEN))
    t("mm.0.bias", (HIDDEN,), dtype=np.float32)
    t("mm.2.weight", (HIDDEN, HIDDEN))
    t("mm.2.bias", (HIDDEN,), dtype=np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


_quiet_log = None  # the ctypes callback must outlive the library's use of it


def llama_vision_frame(model: str, mmproj: str, threads: int) -> float:
    """Frames/s of llama.cpp's clip encoding one 384×384 frame (random pixels) with `mmproj`:
    libmtmd's own preprocessing and encode, timed around mtmd_encode_chunk."""
    import ctypes

    import llama_cpp as L
    import llama_cpp.mtmd_cpp as M

    L.llama_backend_init()
    # clip logs every tensor it loads; keep errors only (level 4 = GGML_LOG_LEVEL_ERROR).
    global _quiet_log
    _quiet_log = L.llama_log_callback(
        lambda level, text, _: sys.stderr.write(text.decode(errors="replace")) if level >= 4 else None)
    M.mtmd_log_set(_quiet_log, None)
    m = L.llama_model_load_from_file(model.encode(), L.llama_model_default_params())
    if not m:
        raise RuntimeError(f"llama.cpp could not load {model}")
    params = M.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = threads
    params.print_timings = False
    params.warmup = False
    ctx = M.mtmd_init_from_file(mmproj.encode(), m, params)
    if not ctx:
        L.llama_model_free(m)
        raise RuntimeError(f"llama.cpp's clip could not load {mmproj}")
    pixels = np.random.default_rng(5).integers(0, 256, V_IMAGE * V_IMAGE * 3, dtype=np.uint8)
    data = (ctypes.c_uint8 * pixels.size).from_buffer_copy(pixels.tobytes())
    bitmap = M.mtmd_bitmap_init(V_IMAGE, V_IMAGE, data)
    chunks = M.mtmd_input_chunks_init()
    try:
        marker = M.mtmd_default_marker()
        text = M.mtmd_input_text()
        text.text, text.text_len = marker, len(marker)
        text.add_special, text.parse_special = False, True
        bitmaps = (M.mtmd_bitmap_p_ctypes * 1)(bitmap)
        if M.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1) != 0:
            raise RuntimeError("mtmd_tokenize failed")
        image = next(M.mtmd_input_chunks_get(chunks, i) for i in range(M.mtmd_input_chunks_size(chunks))
                     if M.mtmd_input_chunk_get_type(M.mtmd_input_chunks_get(chunks, i))
                     == M.MTMD_INPUT_CHUNK_TYPE_IMAGE)
        t0 = time.perf_counter()
        if M.mtmd_encode_chunk(ctx, image) != 0:
            raise RuntimeError("mtmd_encode_chunk failed")
        return 1.0 / (time.perf_counter() - t0)
    finally:
        M.mtmd_input_chunks_free(chunks)
        M.mtmd_bitmap_free(bitmap)
        M.mtmd_free(ctx)
        L.llama_model_free(m)


def ids(n: int, salt: int = 13) -> list:
    return [(i * 7919 + salt) % VOCAB for i in range(n)]


def decode_after_prompt(llm, steps: int, prompt: int = 512) -> float:
    """Batch-1 decode tokens/s of `llm` after a fresh `prompt`-token prefill."""
    llm.reset()
    llm.eval(ids(prompt))
    t0 = time.perf_counter()
    for i in range(steps):
        llm.eval([42 + i])
    return steps / (time.perf_counter() - t0)


def quantize_q8_0(model: str, out: str) -> None:
    """llama.cpp's own Q8_0 quantisation of the F16 GGUF `model` (every 2-D weight, the tied
    embedding and head included, as `llama-quantize ... Q8_0` does)."""
    import llama_cpp as L

    params = L.llama_model_quantize_default_params()
    params.ftype = L.LLAMA_FTYPE_MOSTLY_Q8_0
    params.nthread = 2
    if L.llama_model_quantize(model.encode(), out.encode(), params) != 0:
        raise RuntimeError(f"llama_model_quantize failed on {model}")


def disable_extra_buffer_types() -> None:
    """Every model llama.cpp loads from here on keeps its weights as the GGUF stores them: no
    extra CPU buffer types (its AMX tiles and repacked Q8_0/Q4_0 layouts), so Q8_0 runs on its
    AVX512-VNNI / AVX2 dot products. For CPUs where those paths fail (llama-cpp-python 0.3.36's
    first decode of a Q8_0 model segfaults in them on a Sapphire Rapids-class Xeon with AMX)."""
    import llama_cpp
    import llama_cpp.llama_cpp as C

    default = C.llama_model_default_params

    def without_extra_buffer_types():
        params = default()
        params.use_extra_bufts = False
        return params

    # The Llama class and this script both call it through the module.
    C.llama_model_default_params = without_extra_buffer_types
    llama_cpp.llama_model_default_params = without_extra_buffer_types


def llama_round(model: str, mmproj: str, threads: int, decode_steps: int) -> dict:
    """One round of llama.cpp figures: prefill 512 / 2048, decode batch 1 at depth 512 (f16 and
    4-bit KV) and 2048, decode of 16 sequences together, and one vision frame (none when
    `mmproj` is empty)."""
    from llama_cpp import Llama

    def load(**kv_options):
        return Llama(model_path=model, n_ctx=4096, n_batch=2048, n_ubatch=512, n_threads=threads,
                     n_threads_batch=threads, verbose=False, **kv_options)

    out = {}
    llm = load()
    for n in (512, 2048):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids(n))
        out[f"prefill_{n}"] = n / (time.perf_counter() - t0)
    out["decode_batch1"] = decode_after_prompt(llm, decode_steps)
    out["decode_batch1_depth2048"] = decode_after_prompt(llm, decode_steps, prompt=2048)
    del llm
    # KV cache in 4 bits (q4_0 keys and values; V quantisation needs flash attention).
    llm = load(flash_attn=True, type_k=2, type_v=2)
    out["decode_batch1_kv4"] = decode_after_prompt(llm, decode_steps)
    del llm
    out["decode_batch16"] = llama_batched_decode(model, threads, decode_steps)
    if mmproj:
        out["vision_frames_per_s"] = llama_vision_frame(model, mmproj, threads)
    return out


def llama_batched_decode(model: str, threads: int, steps: int, batch: int = 16) -> float:
    """llama.cpp decoding `batch` sequences together (one llama_decode per step, each sequence
    its own seq_id in a unified KV cache), after prompts of 32-88 tokens as framezip's batch 16
    gets them; aggregate tokens/s. Through llama-cpp-python's low-level API (its Llama class
    holds one sequence)."""
    import llama_cpp as L

    L.llama_backend_init()
    model_params = L.llama_model_default_params()
    m = L.llama_model_load_from_file(model.encode(), model_params)
    if not m:
        raise RuntimeError(f"llama.cpp could not load {model}")
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = 4096, 2048, 512, batch
    cp.n_threads = cp.n_threads_batch = threads
    cp.kv_unified = True
    ctx = L.llama_init_from_model(m, cp)
    b = L.llama_batch_init(2048, 0, batch)

    def decode(items):
        b.n_tokens = len(items)
        for i, (tok, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = tok, pos, 1, logits
            b.seq_id[i][0] = seq
        if L.llama_decode(ctx, b) != 0:
            raise RuntimeError("llama_decode failed")

    try:
        lengths = [32 + 8 * (s % 8) for s in range(batch)]
        for s, n in enumerate(lengths):
            prompt = ids(n, 100 + s)
            decode([(t, p, s, p == n - 1) for p, t in enumerate(prompt)])
        decode([(42, lengths[s], s, True) for s in range(batch)])  # warm-up step
        t0 = time.perf_counter()
        for i in range(steps):
            decode([(42 + i, lengths[s] + 1 + i, s, True) for s in range(batch)])
        return batch * steps / (time.perf_counter() - t0)
    finally:
        L.llama_batch_free(b)
        L.llama_free(ctx)
        L.llama_model_free(m)


def framezip_round(binary: str, threads: int, weight_format: str, vision: bool) -> dict:
    cmd = [binary, "bench", "engine", "--threads", str(threads), "--weight-format", weight_format,
           "--json"]
    if not vision:
        cmd.append("--skip-vision")
    run = subprocess.run(cmd, capture_output=True, text=True, check=True)
    j = json.loads(run.stdout.strip().splitlines()[-1])
    r = {x["name"]: x["value"] for x in j["results"]}
    out = {"prefill_512": r["prefill_tokens_per_s_512"],
           "prefill_2048": r["prefill_tokens_per_s_2048"],
           "decode_batch1": r["decode_tokens_per_s_batch1"],
           "decode_batch1_depth2048": r["decode_tokens_per_s_batch1_depth2048"],
           "decode_batch1_kv4": r["decode_tokens_per_s_batch1_kv4"],
           "decode_batch16": r["decode_tokens_per_s_batch16"],
           "machine": j["machine"]}
    if vision:
        out["vision_frames_per_s"] = 1000.0 / r["vision_tower_ms_per_frame"]
    return out


# llama.cpp weight format -> framezip --weight-format compared with it.
FRAMEZIP_FORMAT = {"f16": "bf16", "q8_0": "int8"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framezip", default="build/bin/framezip")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--decode-steps", type=int, default=24)
    ap.add_argument("--gguf", default="", help="reuse this GGUF instead of writing one")
    ap.add_argument("--mmproj", default="", help="reuse this mmproj GGUF instead of writing one")
    ap.add_argument("--formats", default="f16,q8_0",
                    help="llama.cpp weight formats, each beside framezip's: f16 (bf16), q8_0 (int8)")
    ap.add_argument("--skip-vision", action="store_true", help="leave out the vision frame")
    ap.add_argument("--no-extra-bufts", action="store_true",
                    help="llama.cpp without its extra CPU buffer types (AMX, repacked weights): "
                         "its VNNI/AVX2 paths, for CPUs where the others crash")
    args = ap.parse_args()
    if args.no_extra_bufts:
        disable_extra_buffer_types()
    formats = args.formats.split(",")
    for f in formats:
        if f not in FRAMEZIP_FORMAT:
            ap.error(f"--formats: unknown format {f!r} (f16, q8_0)")

    model = args.gguf
    tmp = None
    if not model:
        tmp = tempfile.TemporaryDirectory()
        model = os.path.join(tmp.name, "qwen2-0.5b-shape-f16.gguf")
        t0 = time.perf_counter()
        write_gguf(model)
        print(f"wrote {model} ({os.path.getsize(model) / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    mmproj = args.mmproj
    if not mmproj and not args.skip_vision and "f16" in formats:
        tmp = tmp or tempfile.TemporaryDirectory()
        mmproj = os.path.join(tmp.name, "siglip-so400m-shape-mmproj-f16.gguf")
        t0 = time.perf_counter()
        write_mmproj(mmproj)
        print(f"wrote {mmproj} ({os.path.getsize(mmproj) / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    models = {"f16": model}
    if "q8_0" in formats:
        tmp = tmp or tempfile.TemporaryDirectory()
        models["q8_0"] = os.path.join(tmp.name, "qwen2-0.5b-shape-q8_0.gguf")
        t0 = time.perf_counter()
        quantize_q8_0(model, models["q8_0"])
        print(f"quantised to {models['q8_0']} "
              f"({os.path.getsize(models['q8_0']) / 2**20:.0f} MiB) in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    llama = {f: [] for f in formats}
    fz = {f: [] for f in formats}
    machine = {}
    for r in range(args.rounds):
        for f in formats:
            vision = f == "f16" and not args.skip_vision
            lr = llama_round(models[f], mmproj if vision else "", args.threads, args.decode_steps)
            print(f"round {r + 1} llama.cpp {f}: " +
                  ", ".join(f"{k} {v:.2f}" for k, v in lr.items()), flush=True)
            llama[f].append(lr)
            fr = framezip_round(args.framezip, args.threads, FRAMEZIP_FORMAT[f], vision)
            machine = fr.pop("machine")
            print(f"round {r + 1} framezip {FRAMEZIP_FORMAT[f]}: " +
                  ", ".join(f"{k} {v:.2f}" for k, v in fr.items()), flush=True)
            fz[f].append(fr)

    def med(rows, key):
        return statistics.median(row[key] for row in rows)

    table = {}
    for f in formats:
        for key in ("prefill_512", "prefill_2048", "decode_batch1", "decode_batch1_depth2048",
                    "decode_batch1_kv4", "decode_batch16", "vision_frames_per_s"):
            if key not in fz[f][0] or key not in llama[f][0]:
                continue
            name = key if f == "f16" else f"{f}/{FRAMEZIP_FORMAT[f]} {key}"
            table[name] = {"llama_cpp": med(llama[f], key), "framezip": med(fz[f], key),
                           "ratio": med(fz[f], key) / med(llama[f], key)}
    import llama_cpp
    result = {"machine": machine, "threads": args.threads, "rounds": args.rounds,
              "llama_cpp_extra_buffer_types": not args.no_extra_bufts,
              "llama_cpp_python": llama_cpp.__version__,
              "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode(),
              "figures": table}
    for key, v in table.items():
        line = f"{key:34s}" + "".join(f" {k} {x:8.2f}" for k, x in v.items())
        print(line)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
