"""The torch peer's row names: bench/gpu/torch_peer.py writes its rows under them and
bench/gpu/write_latest.py reads them, so both import them from here (no torch needed)."""

EAGER_PREFILL_ROW = "torch eager Qwen2-0.5B-shaped prefill bf16 T={ctx}"
EAGER_DECODE_ROW = "torch eager Qwen2-0.5B-shaped decode bf16 batch {batch} ctx {ctx}"
STATIC_PREFILL_ROW = "torch static-cache Qwen2-0.5B-shaped prefill bf16 T={ctx}"
GRAPH_DECODE_ROW = "torch static-cache CUDA-graph Qwen2-0.5B-shaped decode bf16 batch {batch} ctx {ctx}"
SDPA_ROW = "torch SDPA causal {dtype} {label} T={t}"
VISION_ROW = "torch eager SigLIP-so400m (OV) bf16, 384 px, {frames} frames in batches of 8"
