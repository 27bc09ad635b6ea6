#!/usr/bin/env python3
"""Writes golden outputs of the Hugging Face reference for a (tiny) model directory.

An explicit command, never run by tests. For a model made by tools/make_tiny_model.py:

  .venv/bin/python tools/golden/gen_goldens.py \
      --model tests/data/models/tiny-ov-qwen2-f32 --out tests/data/golden/tiny-ov-qwen2-f32

For a trained video model, --synthvid SPLIT:INDEX replaces the synthetic image + video prompt by
one synthvid item (tools/synthvid): its rendered frames (every frame a model frame, no mp4 round
trip, so no codec dependency) and its question, video only, as the model was trained;
--frames N keeps only its first N frames (smaller goldens).

Files written to --out:
  tokenizer_ids.json  tokenizers-library ids (add_special_tokens true/false) and decodes of a
                      multilingual / emoji / code / whitespace / digits / special-token corpus
                      (checked equal to transformers' AutoTokenizer)
  chat.json           rendered chat templates (processor.apply_chat_template, tokenize=False),
                      placeholder counts for image sizes and frame counts (tiny layout and the
                      real 384-px OneVision layout), and the expanded prompt ids
  forward.safetensors fixed multimodal input and reference tensors (see forward.json "tensors")
  forward.json        input ids, 32 greedy tokens with each step's top-1 - top-2 logit margin,
                      the tensor list with meanings
  manifest.json       versions, seed, dtype, model, command
"""

import argparse
import json
import os
import platform
import sys

import numpy as np
import torch

CORPUS = [
    "Hello world",
    "What do you see in this image?",
    " leading space",
    "  two leading spaces",
    "trailing spaces   ",
    "\n\n\nnewlines\r\n\r\nand CRLF\n",
    "tabs\tand\t\tmore\ttabs",
    "I'm sure they're here, we've done it, she'll go, he'd say, it's JOHN'S",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -7 1e-6 0x1F 2024-11-30 1,000,000",
    "Le cœur a ses raisons que la raison ne connaît point. Ça va très bien!",
    "Über den Wolken: Straße, Größe, Äpfel.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "我能吞下玻璃而不伤身体。这是一个视频。",
    "日本語のテキストです。カタカナとひらがな。",
    "한국어 문장입니다. 안녕하세요!",
    "مرحبا بالعالم. هذه جملة عربية.",
    "नमस्ते दुनिया। यह एक वाक्य है।",
    "Emoji: 😀 🎉 👍🏽 🇫🇷 ❤️ 👨‍👩‍👧‍👦 🤖🤖🤖",
    "def forward(self, x):\n    return self.linear(x) + 1\n\nfor i in range(10):\n\tprint(i)\n",
    "int main() { std::vector<int> v = {1, 2, 3}; return v.size() == 3 ? 0 : 1; }",
    "e\u0301 vs \u00e9, A\u030a vs \u00c5, \ufb01 ligature, \u2126 ohm",
    "nbsp\u00a0here, nel\u0085here, ideographic\u3000space, em\u2003space, \u2028line sep",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<image><image>\n<video>text<image>",
    "<|im_end|><|im_start|><|endoftext|>",
    "partial <im_start|> and <|im_start> are plain text",
    "x<|im_end|>y<|im_end|><|im_end|>z",
    "!!!???...,,,;;;:::",
    "a" * 80,
    "The quick brown fox jumps over the lazy dog. " * 3,
    "",
    " ",
    "\n",
    "😀",
    "\u0000 nul and \u0007 bell and \u007f del",
]

CHAT_CASES = [
    ("single_image", [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "What is shown in this image?"}]}], True),
    ("video_then_text", [{"role": "user", "content": [
        {"type": "text", "text": "Describe the video."}, {"type": "video"}]}], True),
    ("system_multi_turn", [
        {"role": "system", "content": [{"type": "text", "text": "You are a helpful assistant."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A radar chart."}]},
        {"role": "user", "content": [{"type": "text", "text": "And "},
                                     {"type": "image"}, {"type": "text", "text": "this one?"}]},
    ], True),
    ("mixed_items_no_prompt", [{"role": "user", "content": [
        {"type": "video"}, {"type": "text", "text": "a"}, {"type": "image"},
        {"type": "text", "text": "b"}, {"type": "image"}]}], False),
    ("unicode_text", [{"role": "user", "content": [
        {"type": "text", "text": "Ça va? 😀 我能\n  indented"}]}], True),
]

# (height, width) cases of docs/models.md §2.3 (the real OV layout) and small ones for the tiny one.
REAL_SIZES = [(384, 384), (480, 640), (640, 480), (768, 768), (1024, 1024), (899, 1024),
              (720, 1280), (1080, 1920), (2000, 3000), (4000, 500), (1, 1), (333, 1999)]
TINY_SIZES = [(32, 32), (40, 72), (72, 40), (64, 64), (20, 90), (95, 31), (17, 17), (96, 96)]


def synthetic_image(h, w, seed):
    """Deterministic RGB uint8 image: smooth gradients plus seeded noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)),
                    ((x + y) * 127 // max(h + w - 2, 1))], axis=-1).astype(np.int32)
    img = np.clip(img + rng.integers(-20, 21, size=img.shape), 0, 255).astype(np.uint8)
    return img


def tokenizer_goldens(model_dir):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(model_dir)
    cases = []
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=True).ids
        ids_plain = tok.encode(text, add_special_tokens=False).ids
        hf_ids = hf(text, add_special_tokens=True)["input_ids"]
        if hf_ids != ids:
            sys.exit(f"tokenizers and transformers disagree on {text!r}: {ids} vs {hf_ids}")
        cases.append({"text": text, "ids": ids, "ids_no_special": ids_plain,
                      "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    # Decoding arbitrary id sequences (incl. ids that split multi-byte characters).
    rng = np.random.default_rng(1234)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    decodes = []
    for n in [1, 2, 3, 5, 8, 13, 40]:
        ids = [int(i) for i in rng.integers(0, vocab, size=n)]
        decodes.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                        "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return {"encode": cases, "decode": decodes}


def chat_goldens(model_dir, processor, arch):
    out = {"cases": [], "image_tokens": [], "video_tokens": []}
    for name, messages, gen in CHAT_CASES:
        rendered = processor.apply_chat_template(messages, add_generation_prompt=gen,
                                                 tokenize=False)
        out["cases"].append({"name": name, "messages": messages, "add_generation_prompt": gen,
                             "rendered": rendered})
    if arch == "llava_onevision":
        from transformers import (LlavaOnevisionImageProcessor, LlavaOnevisionProcessor,
                                  LlavaOnevisionVideoProcessor)
        real = LlavaOnevisionProcessor(image_processor=LlavaOnevisionImageProcessor(),
                                       video_processor=LlavaOnevisionVideoProcessor(),
                                       tokenizer=processor.tokenizer, num_image_tokens=729,
                                       vision_feature_select_strategy="full")
        for layout, proc, sizes in [("real", real, REAL_SIZES), ("tiny", processor, TINY_SIZES)]:
            mm = proc._get_num_multimodal_tokens(image_sizes=sizes,
                                                 video_sizes=[(f, 32, 32) for f in (1, 2, 8)])
            for (h, w), n in zip(sizes, mm["num_image_tokens"]):
                out["image_tokens"].append({"layout": layout, "height": h, "width": w,
                                            "tokens": int(n)})
            for f, n in zip((1, 2, 8), mm["num_video_tokens"]):
                out["video_tokens"].append({"layout": layout, "frames": f, "tokens": int(n)})
    return out


def synthvid_item(spec, frames=None):
    """(record, frames uint8 [F, H, W, 3]) of synthvid item "SPLIT:INDEX", first `frames` only."""
    split, index = spec.split(":")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "synthvid"))
    import synthvid  # noqa: PLC0415
    rec, video = synthvid.make_item(split, int(index))
    return rec, video[:frames]


def image_goldens(inputs, inner, cfg, arch, dtype, tensors, meta, f32):
    """Vision tower, feature selection, projector and OV packing of the prompt's image."""
    pv = inputs["pixel_values"]
    if pv.dim() == 5:  # [1, tiles, 3, H, W]
        pv = pv[0]
    tensors["pixel_values"] = f32(pv.to(dtype))
    vis = inner.vision_tower(pv.to(dtype), output_hidden_states=True, return_dict=True)
    for i, h in enumerate(vis.hidden_states):
        tensors[f"vision.hidden_states.{i}"] = f32(h)
    layer = cfg.vision_feature_layer
    sel = vis.hidden_states[layer] if isinstance(layer, int) else torch.cat(
        [vis.hidden_states[k] for k in layer], dim=-1)
    if cfg.vision_feature_select_strategy == "default":
        sel = sel[:, 1:]
    tensors["image.selected_features"] = f32(sel)
    tensors["image.projected"] = f32(inner.multi_modal_projector(sel))
    if arch == "llava_onevision":
        img = inner.get_image_features(
            pixel_values=inputs["pixel_values"].to(dtype), image_sizes=inputs["image_sizes"],
            vision_feature_layer=layer,
            vision_feature_select_strategy=cfg.vision_feature_select_strategy,
            vision_aspect_ratio=cfg.vision_aspect_ratio,
            batch_num_images=inputs.get("batch_num_images"), return_dict=True)
        packed = img.pooler_output
        if isinstance(packed, (list, tuple)):  # one tensor per image
            packed = torch.cat(list(packed), dim=0)
        tensors["image.packed"] = f32(packed)
        meta["image_sizes"] = inputs["image_sizes"].tolist()


def forward_goldens(model_dir, processor, model, arch, seed, synthvid_spec=None,
                    synthvid_frames=None):
    """A fixed multimodal prompt through the whole model; tensors and the greedy continuation."""
    tensors, meta = {}, {}
    if synthvid_spec is not None:
        rec, frames = synthvid_item(synthvid_spec, synthvid_frames)
        meta["synthvid"] = {"item": synthvid_spec, "id": rec["id"], "task": rec["task"],
                            "num_frames": rec["num_frames"], "frames_fed": len(frames),
                            "question": rec["question"], "answer": rec["answer"]}
        messages = [{"role": "user", "content": [{"type": "video"},
                                                 {"type": "text", "text": rec["question"]}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True,
                                               tokenize=False)
        inputs = processor(text=prompt, videos=[frames], return_tensors="pt")
    elif arch == "llava_onevision":
        image = synthetic_image(24, 40, seed)
        video = np.stack([synthetic_image(48, 48, seed + 1 + f) for f in range(2)])
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "video"},
                                                 {"type": "text", "text": "What happens here?"}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True,
                                               tokenize=False)
        inputs = processor(text=prompt, images=[image], videos=[video], return_tensors="pt")
    else:
        image = synthetic_image(24, 40, seed)
        messages = [{"role": "user", "content": [{"type": "image"},
                                                 {"type": "text", "text": "What happens here?"}]}]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True,
                                               tokenize=False)
        inputs = processor(text=prompt, images=[image], return_tensors="pt")
    dtype = next(model.parameters()).dtype
    meta["prompt"] = prompt
    meta["input_ids"] = inputs["input_ids"][0].tolist()
    # Reference tensors keep the model dtype when it is 16-bit (exact, half the bytes). Pixel
    # inputs too: the model casts them to its dtype before the vision tower, so that rounding is
    # exactly what it sees (a float32 model gets the processor's float32 values).
    keep = torch.bfloat16 if dtype == torch.bfloat16 else torch.float32

    def f32(t):
        return t.detach().to(keep).contiguous().clone()

    with torch.no_grad():
        inner = model.model
        cfg = model.config
        layer = cfg.vision_feature_layer
        if "pixel_values" in inputs:
            image_goldens(inputs, inner, cfg, arch, dtype, tensors, meta, f32)
        if "pixel_values_videos" in inputs:
            pvv = inputs["pixel_values_videos"]
            tensors["pixel_values_videos"] = f32(pvv[0].to(dtype))
            vid = inner.get_video_features(
                pixel_values_videos=pvv.to(dtype), vision_feature_layer=layer,
                vision_feature_select_strategy=cfg.vision_feature_select_strategy,
                return_dict=True)
            tensors["video.pooled_with_newline"] = f32(vid.pooler_output[0])
        kwargs = {k: v for k, v in inputs.items() if k != "input_ids"}
        for k in ("pixel_values", "pixel_values_videos"):
            if k in kwargs:
                kwargs[k] = kwargs[k].to(dtype)
        out = model(input_ids=inputs["input_ids"], output_hidden_states=True, return_dict=True,
                    **kwargs)
        # hidden_states[0] = embeddings after visual scatter; [k] = output of decoder layer k-1;
        # the LAST entry is after the final norm (transformers convention).
        for i, h in enumerate(out.hidden_states):
            tensors[f"decoder.hidden_states.{i}"] = f32(h[0])
        tensors["logits"] = f32(out.logits[0])

        # 32 greedy tokens with the KV cache, argmax of float32 logits, no EOS stop. Each step's
        # top-1 minus top-2 logit goes with them: where it is within the logits' tolerance, another
        # implementation may rightly pick the runner-up (a bf16 model's tail after its answer).
        generated, margins = [], []
        past = out.past_key_values

        def pick(row):
            row = row.float()
            top2 = torch.topk(row, 2).values
            margins.append(float(top2[0] - top2[1]))
            return int(torch.argmax(row))  # argmax: the first of equal maxima, as before

        next_id = pick(out.logits[0, -1])
        ids = inputs["input_ids"]
        attn = inputs["attention_mask"]
        for _ in range(32):
            generated.append(next_id)
            ids = torch.cat([ids, torch.tensor([[next_id]])], dim=1)
            attn = torch.cat([attn, torch.ones((1, 1), dtype=attn.dtype)], dim=1)
            step = model(input_ids=ids[:, -1:], attention_mask=attn, past_key_values=past,
                         use_cache=True, return_dict=True)
            past = step.past_key_values
            next_id = pick(step.logits[0, -1])
        meta["greedy_tokens"] = generated
        meta["greedy_margins"] = margins[:len(generated)]
        meta["greedy_text"] = processor.tokenizer.decode(generated)
    meta["tensors"] = {
        "pixel_values": "processor output for the image, [tiles, 3, S, S] (base tile first), in "
                        "the model dtype (what the vision tower is fed)",
        "vision.hidden_states.K": "vision tower hidden_states[K], K=0 embeddings, K=i+1 after "
                                  "layer i (no post_layernorm)",
        "image.selected_features": "hidden_states[vision_feature_layer] after select strategy",
        "image.projected": "multi_modal_projector(selected) per tile",
        "image.packed": "OV pack_image_features output [T_img, H] (scattered into <image>)",
        "pixel_values_videos": "processor output for the video, [F, 3, S, S], model dtype",
        "video.pooled_with_newline": "OV get_video_features: pooled frames + one newline",
        "decoder.hidden_states.K": "K=0 input embeddings (visual rows scattered), K=i+1 output "
                                   "of layer i; the LAST one is after the final norm",
        "logits": "[L, vocab] of the prompt (model dtype; f32 models stored f32, bf16 as bf16)",
    }
    return tensors, meta


def quantization_versions() -> dict:
    """compressed-tensors' version where it is installed (it reads quantised checkpoints)."""
    try:
        import compressed_tensors
    except ImportError:
        return {}
    return {"compressed_tensors": compressed_tensors.__version__}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-tokenizer", action="store_true")
    p.add_argument("--skip-forward", action="store_true")
    p.add_argument("--synthvid", metavar="SPLIT:INDEX",
                   help="forward input: this synthvid item's frames and question (video only)")
    p.add_argument("--frames", type=int, metavar="N",
                   help="with --synthvid: feed only the item's first N frames")
    args = p.parse_args()

    import safetensors
    import tokenizers
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoProcessor

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.model, "config.json")) as f:
        arch = json.load(f)["model_type"]
    processor = AutoProcessor.from_pretrained(args.model)

    def dump(name, obj):
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(obj, f, indent=1, ensure_ascii=False)
            f.write("\n")

    if not args.skip_tokenizer:
        dump("tokenizer_ids.json", tokenizer_goldens(args.model))
    dump("chat.json", chat_goldens(args.model, processor, arch))
    dtype = None
    if not args.skip_forward:
        from transformers import LlavaForConditionalGeneration as Llava
        from transformers import LlavaOnevisionForConditionalGeneration as OV
        cls = OV if arch == "llava_onevision" else Llava
        extra = {}
        with open(os.path.join(args.model, "config.json")) as f:
            quantization = json.load(f).get("quantization_config") or {}
        if quantization.get("quant_method") == "compressed-tensors":
            # Decompressed at load (W = q · scale, in the model's dtype) and run dense, each
            # quantised Linear fake-quantising its input as the scheme declares (int8 per token).
            from transformers import CompressedTensorsConfig
            extra["quantization_config"] = CompressedTensorsConfig(run_compressed=False)
        model = cls.from_pretrained(args.model, dtype="auto", attn_implementation="eager",
                                    **extra).eval()
        dtype = str(next(model.parameters()).dtype)
        tensors, meta = forward_goldens(args.model, processor, model, arch, args.seed,
                                       args.synthvid, args.frames)
        save_file(tensors, os.path.join(args.out, "forward.safetensors"),
                  metadata={"format": "pt"})
        dump("forward.json", meta)
    dump("manifest.json", {
        "model": os.path.relpath(args.model, os.path.join(args.out, "..", "..", "..", "..")),
        "model_type": arch, "dtype": dtype, "seed": args.seed,
        "attn_implementation": "eager",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
                     "numpy": np.__version__, **quantization_versions()},
        "command": " ".join(["tools/golden/gen_goldens.py"] + sys.argv[1:]),
    })
    print(f"wrote goldens for {args.model} to {args.out}")


if __name__ == "__main__":
    main()
