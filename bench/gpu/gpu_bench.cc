// `framezip bench gpu`: see gpu_bench.h. Calls the kernel launchers directly with buffers
// allocated once, so no cudaMalloc/cudaFree sits inside a timed region. Every CUDA call is
// checked; a failure prints what failed and the suite exits 1.
#include "bench/gpu/gpu_bench.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/gpu/bench_fill.cuh"
#include "bench/gpu/fp8_e2e.h"
#include "bench/gpu/model_e2e.h"
#include "engine/kernels/cuda/attention.cuh"
#include "engine/kernels/cuda/attention_mma.cuh"
#include "engine/kernels/cuda/cast.cuh"
#include "engine/kernels/cuda/flashinfer_paged.cuh"
#include "engine/kernels/cuda/flashinfer_prefill.cuh"
#include "engine/kernels/cuda/kv_quant.cuh"
#include "engine/kernels/cuda/low_rank.cuh"
#include "engine/kernels/cuda/paged_attention.cuh"
#include "engine/kernels/cuda/zipvl.cuh"

namespace framezip::benchgpu {
namespace {

namespace kc = engine::cuda;

[[noreturn]] void Fail(const char* what, const char* why) {
  std::fprintf(stderr, "framezip bench gpu: %s failed: %s\n", what, why);
  std::exit(1);
}
void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) Fail(what, cudaGetErrorString(err));
}
void Check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) Fail(what, cublasGetStatusString(st));
}

// A device allocation freed at scope end.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    Check(cudaMalloc(&ptr_, std::max<size_t>(bytes, 256)), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Median milliseconds of `reps` timed calls after `warmup` untimed ones (cudaEvents on the
// default stream, each call timed on its own).
double MedianMs(const std::function<void()>& fn, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) fn();
  Check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    Check(cudaEventRecord(start), "cudaEventRecord");
    fn();
    Check(cudaEventRecord(stop), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), "timed region");
    float t = 0;
    Check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Result {
  std::string name;
  double value;
  std::string unit;
  double target = 0;  // 0: none
};

class Results {
 public:
  void Add(std::string name, double value, std::string unit, double target = 0) {
    if (target > 0) {
      std::printf("%s: %.4g %s (target >= %.4g, %s)\n", name.c_str(), value, unit.c_str(), target,
                  value >= target ? "ok" : "MISSED");
    } else {
      std::printf("%s: %.4g %s\n", name.c_str(), value, unit.c_str());
    }
    std::fflush(stdout);
    results_.push_back({std::move(name), value, std::move(unit), target});
  }
  // tools/bench/bench_report.h's schema, written without a JSON library (the GPU-check build
  // has none): {"suite", "machine": {...}, "results": [...]} on one line.
  std::string Json(const std::string& gpu, const std::string& cpu, const std::string& notes) const {
    std::string s = "{\"suite\":\"gpu\",\"machine\":{\"cpu\":\"";
    s += Escape(cpu);
    s += "\",\"threads\":1,\"gpu\":\"";
    s += Escape(gpu);
    s += "\"},\"date\":\"";
    s += Now();
    s += "\",\"notes\":\"";
    s += Escape(notes);
    s += "\",\"results\":[";
    for (size_t i = 0; i < results_.size(); ++i) {
      const Result& r = results_[i];
      if (i > 0) s += ",";
      s += "{\"name\":\"";
      s += Escape(r.name);
      s += "\",\"value\":";
      s += Number(std::isfinite(r.value) ? r.value : -1.0);
      s += ",\"unit\":\"";
      s += Escape(r.unit);
      s += "\"";
      if (r.target > 0) {
        s += ",\"target\":";
        s += Number(r.target);
        s += r.value >= r.target ? ",\"ok\":true" : ",\"ok\":false";
      }
      s += "}";
    }
    s += "]}";
    return s;
  }

 private:
  static std::string Number(double v) {
    char num[64];
    std::snprintf(num, sizeof(num), "%.6g", v);
    return num;
  }
  static std::string Escape(const std::string& in) {
    std::string out;
    for (char c : in) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out;
  }
  static std::string Now() {
    const std::time_t t = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return buf;
  }
  std::vector<Result> results_;
};

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

// ---- ceilings -------------------------------------------------------------------------------

double CopyGbps(Results& res) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  Check(FillBytes(src.get(), static_cast<int64_t>(bytes), 1, nullptr), "fill");
  const double ms = MedianMs(
      [&] {
        Check(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice), "copy");
      },
      3, 20);
  const double gbps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;  // read + write
  res.Add("copy bandwidth (device-to-device memcpy, 1 GiB, read+write)", gbps, "GB/s");
  return gbps;
}

void GemmTflops(Results& res) {
  const int n = 8192;
  const size_t elems = static_cast<size_t>(n) * n;
  DeviceBuffer a(elems * 2), b(elems * 2), c(elems * 2), tmp(elems * 4);
  for (auto* buf : {&a, &b}) {
    Check(
        FillNormal(tmp.get<float>(), static_cast<int64_t>(elems), buf == &a ? 2 : 3, 1.f, nullptr),
        "fill");
    kc::CastParams cp;
    cp.in = tmp.get();
    cp.out = buf->get();
    cp.n = static_cast<int64_t>(elems);
    cp.in_kind = kc::FloatKind::kF32;
    cp.out_kind = kc::FloatKind::kBF16;
    Check(kc::LaunchCast(cp, nullptr), "cast to bf16");
  }
  cublasHandle_t handle;
  Check(cublasCreate(&handle), "cublasCreate");
  const float alpha = 1.f, beta = 0.f;
  const double ms = MedianMs(
      [&] {
        Check(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), CUDA_R_16BF,
                           n, b.get(), CUDA_R_16BF, n, &beta, c.get(), CUDA_R_16BF, n,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      },
      3, 10);
  cublasDestroy(handle);
  res.Add("bf16 GEMM 8192^3 (cuBLAS, f32 accumulate, random data)",
          2.0 * n * static_cast<double>(n) * n / (ms * 1e-3) / 1e12, "TFLOP/s");
}

// ---- prefill: dense vs ZipVL sparse ---------------------------------------------------------

struct PrefillShape {
  int heads, kv_heads, head_dim;
  const char* label;
};

void Prefill(Results& res, bool quick) {
  const PrefillShape shapes[] = {{14, 2, 64, "Qwen2-0.5B heads 14/2 d64"},
                                 {28, 4, 128, "Qwen2-7B heads 28/4 d128"}};
  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{4096} : std::vector<int64_t>{4096, 16384, 32768};
  const double tau = 0.975;
  for (const PrefillShape& s : shapes) {
    const int64_t tmax = sizes.back();
    const int64_t qn = tmax * s.heads * s.head_dim, kn = tmax * s.kv_heads * s.head_dim;
    DeviceBuffer q(qn * 4), k(kn * 4), v(kn * 4), out(qn * 4);
    DeviceBuffer qc(qn * 4), kc_(kn * 4), vc(kn * 4), oc(qn * 4);
    // bf16 copies for the tensor-core kernels, and FlashInfer's bf16 output.
    DeviceBuffer qb(qn * 2), kb(kn * 2), vb(kn * 2), ob(qn * 2);
    DeviceBuffer a(tmax * 4), a_norm(tmax * 4), counts(tmax * 4), idx(tmax * 4), probes(256 * 4);
    size_t topp_bytes = 0;  // the largest size's workspace, then the count
    for (const int64_t t : sizes) topp_bytes = std::max(topp_bytes, kc::TopPWorkspaceBytes(t));
    DeviceBuffer topp_ws(topp_bytes + 256);
    for (const int64_t t : sizes) {
      // Structured activations (bench_fill.cuh): 15% salient tokens.
      Check(FillNormal(q.get<float>(), t * s.heads * s.head_dim, 10 + t, 1.f, nullptr), "fill q");
      Check(FillNormal(k.get<float>(), t * s.kv_heads * s.head_dim, 20 + t, 1.f, nullptr),
            "fill k");
      Check(FillNormal(v.get<float>(), t * s.kv_heads * s.head_dim, 30 + t, 1.f, nullptr),
            "fill v");
      Check(PlantSalientTokens(q.get<float>(), k.get<float>(), t, s.heads, s.kv_heads, s.head_dim,
                               0.15f, 1.0f, 40 + t, nullptr),
            "plant");
      kc::AttentionParams ap;
      ap.q = q.get<float>();
      ap.k = k.get<float>();
      ap.v = v.get<float>();
      ap.out = out.get<float>();
      ap.batch = 1;
      ap.tq = t;
      ap.tk = t;
      ap.heads = s.heads;
      ap.kv_heads = s.kv_heads;
      ap.head_dim = s.head_dim;
      ap.scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
      ap.causal = true;
      const int reps = t >= 16384 ? 3 : 5;
      const double dense_ms =
          MedianMs([&] { Check(kc::LaunchAttention(ap, nullptr), "dense attention"); }, 1, reps);
      const double flops = 2.0 * static_cast<double>(t) * t * s.head_dim * s.heads;  // causal
      const std::string tag = std::string(s.label) + " T=" + std::to_string(t);
      res.Add("dense causal prefill attention f32 " + tag, flops / (dense_ms * 1e-3) / 1e12,
              "TFLOP/s");
      res.Add("dense causal prefill attention f32 " + tag + " time", dense_ms, "ms");

      // The same attention on tensor cores (attention_mma.cuh): bf16 copies of q, k, v.
      for (int i = 0; i < 3; ++i) {
        kc::CastParams cp;
        cp.in = i == 0 ? q.get() : i == 1 ? k.get() : v.get();
        cp.out = i == 0 ? qb.get() : i == 1 ? kb.get() : vb.get();
        cp.n = t * (i == 0 ? s.heads : s.kv_heads) * s.head_dim;
        cp.out_kind = kc::FloatKind::kBF16;
        Check(kc::LaunchCast(cp, nullptr), "cast to bf16");
      }
      kc::AttentionMmaParams mp;
      mp.q = qb.get();
      mp.k = kb.get();
      mp.v = vb.get();
      mp.out = out.get<float>();
      mp.batch = 1;
      mp.tq = t;
      mp.tk = t;
      mp.heads = s.heads;
      mp.kv_heads = s.kv_heads;
      mp.head_dim = s.head_dim;
      mp.scale = ap.scale;
      mp.causal = true;
      for (int variant = 0; variant < 2; ++variant) {
        mp.pipelined = variant == 1;
        const std::string kernel =
            variant == 1 ? "bf16 tensor cores pipelined " : "bf16 tensor cores ";
        const double mma_ms = MedianMs(
            [&] { Check(kc::LaunchAttentionMma(mp, nullptr), "tensor-core attention"); }, 2, reps);
        res.Add("dense causal prefill attention " + kernel + tag, flops / (mma_ms * 1e-3) / 1e12,
                "TFLOP/s");
        res.Add("dense causal prefill attention " + kernel + tag + " time", mma_ms, "ms");
      }
      // FlashInfer's FlashAttention-2 prefill on the same bf16 copies (bf16 output).
      if (kc::FlashInferBuilt()) {
        kc::FlashInferPrefillParams fp;
        fp.q = qb.get();
        fp.k = kb.get();
        fp.v = vb.get();
        fp.out = ob.get();
        fp.batch = 1;
        fp.tq = t;
        fp.tk = t;
        fp.heads = s.heads;
        fp.kv_heads = s.kv_heads;
        fp.head_dim = s.head_dim;
        fp.scale = ap.scale;
        fp.causal = true;
        std::string error;
        const double fi_ms = MedianMs(
            [&] {
              const cudaError_t e = kc::LaunchFlashInferPrefill(fp, nullptr, &error);
              Check(e, ("FlashInfer prefill attention " + error).c_str());
            },
            2, reps);
        res.Add("dense causal prefill attention FlashInfer bf16 " + tag,
                flops / (fi_ms * 1e-3) / 1e12, "TFLOP/s");
        res.Add("dense causal prefill attention FlashInfer bf16 " + tag + " time", fi_ms, "ms");
      }

      // ZipVL: 64 recent + 64 random probes (compress/zipvl.h defaults), head-shared selection.
      std::vector<int32_t> host_probes;
      std::mt19937_64 rng(static_cast<uint64_t>(t));
      std::vector<int32_t> pool(static_cast<size_t>(t - 64));
      for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int32_t>(i);
      std::shuffle(pool.begin(), pool.end(), rng);
      host_probes.assign(pool.begin(), pool.begin() + 64);
      for (int64_t i = t - 64; i < t; ++i) host_probes.push_back(static_cast<int32_t>(i));
      std::sort(host_probes.begin(), host_probes.end());
      Check(cudaMemcpy(probes.get(), host_probes.data(), host_probes.size() * 4,
                       cudaMemcpyHostToDevice),
            "probes");
      int32_t kept = 0;
      auto sparse = [&] {
        kc::ProbeScoresLaunch pp;
        pp.q = q.get<float>();
        pp.k = k.get<float>();
        pp.n = t;
        pp.heads = s.heads;
        pp.kv_heads = s.kv_heads;
        pp.head_dim = s.head_dim;
        pp.probes = probes.get<int32_t>();
        pp.num_probes = static_cast<int32_t>(host_probes.size());
        pp.a = a.get<float>();
        pp.a_norm = a_norm.get<float>();
        pp.counts = counts.get<int32_t>();
        Check(kc::LaunchProbeScores(pp, nullptr), "probe scores");
        kc::TopPLaunch tp;
        tp.a = a.get<float>();
        tp.a_norm = a_norm.get<float>();
        tp.n = t;
        tp.tau = tau;
        tp.workspace = topp_ws.get();
        tp.count = reinterpret_cast<int32_t*>(topp_ws.get<char>() + (topp_bytes + 3) / 4 * 4);
        tp.indices = idx.get<int32_t>();
        Check(kc::LaunchTopP(tp, nullptr), "top-p");
        Check(cudaMemcpy(&kept, tp.count, 4, cudaMemcpyDeviceToHost), "count");  // sizes the rest
        const int32_t* ix = idx.get<int32_t>();
        Check(kc::LaunchGatherRows(q.get<float>(), s.heads * s.head_dim, ix, kept, qc.get<float>(),
                                   nullptr),
              "gather q");
        Check(kc::LaunchGatherRows(k.get<float>(), s.kv_heads * s.head_dim, ix, kept,
                                   kc_.get<float>(), nullptr),
              "gather k");
        Check(kc::LaunchGatherRows(v.get<float>(), s.kv_heads * s.head_dim, ix, kept,
                                   vc.get<float>(), nullptr),
              "gather v");
        kc::AttentionParams sp = ap;
        sp.q = qc.get<float>();
        sp.k = kc_.get<float>();
        sp.v = vc.get<float>();
        sp.out = oc.get<float>();
        sp.tq = kept;
        sp.tk = kept;
        Check(kc::LaunchAttention(sp, nullptr), "sparse attention");
        Check(cudaMemsetAsync(out.get(), 0, t * s.heads * s.head_dim * 4), "zero rest rows");
        Check(kc::LaunchScatterRows(oc.get<float>(), s.heads * s.head_dim, ix, kept,
                                    out.get<float>(), nullptr),
              "scatter");
      };
      const double sparse_ms = MedianMs(sparse, 1, reps);
      res.Add("ZipVL kept ratio (tau 0.975, structured synthetic activations) " + tag,
              static_cast<double>(kept) / static_cast<double>(t), "fraction");
      res.Add("ZipVL sparse prefill (probe+top-p+gather+attention+scatter) " + tag + " time",
              sparse_ms, "ms");
      res.Add("ZipVL sparse prefill speedup vs our dense " + tag, dense_ms / sparse_ms, "x",
              t == 32768 ? 2.6 : 0);
    }
  }
}

// ---- decode over paged KV -------------------------------------------------------------------

struct DecodeShape {
  int heads, kv_heads, head_dim, batch;
  const char* label;
};

// The f16 tensor-core decode time of the batch-1 shape, for the AttentionPack section.
double g_dense_one_sequence_us = 0;

// FlashInfer's paged attention (its batch prefill with one query row per sequence) over the f16
// pages Decode times the project's kernel on: keys and values apart, page p at p·page·c elements,
// `batch` sequences of ctx / page pages each. Planned once (as once per engine step), then timed.
void FlashInferPagedDecode(Results& res, const std::string& tag, const DecodeShape& s, int64_t ctx,
                           int page, const DeviceBuffer& keys, const DeviceBuffer& values,
                           const DeviceBuffer& q_f32, double bytes, double copy_gbps) {
  if (!kc::FlashInferPagedSupports(s.head_dim)) return;
  const int64_t rows = s.batch, c = int64_t{s.kv_heads} * s.head_dim;
  const int64_t per_seq = ctx / page, pages = per_seq * s.batch;
  DeviceBuffer q16(static_cast<size_t>(rows) * s.heads * s.head_dim * 2);
  DeviceBuffer out16(q16.bytes());
  kc::CastParams cp;
  cp.in = q_f32.get();
  cp.out = q16.get();
  cp.n = rows * s.heads * s.head_dim;
  cp.out_kind = kc::FloatKind::kF16;
  Check(kc::LaunchCast(cp, nullptr), "cast q to f16");
  std::vector<int32_t> qo_indptr, page_indptr, indices(static_cast<size_t>(pages)),
      last(static_cast<size_t>(s.batch), page);
  for (int64_t b = 0; b <= s.batch; ++b) {
    qo_indptr.push_back(static_cast<int32_t>(b));
    page_indptr.push_back(static_cast<int32_t>(b * per_seq));
  }
  for (int64_t p = 0; p < pages; ++p) indices[static_cast<size_t>(p)] = static_cast<int32_t>(p);
  auto upload = [](const std::vector<int32_t>& v) {
    auto d = std::make_unique<DeviceBuffer>(v.size() * 4);
    Check(cudaMemcpy(d->get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), "page table");
    return d;
  };
  const auto d_qo = upload(qo_indptr), d_pages = upload(page_indptr), d_idx = upload(indices),
             d_last = upload(last);
  DeviceBuffer float_ws(kc::kFlashInferFloatWorkspaceBytes),
      int_ws(kc::kFlashInferIntWorkspaceBytes);
  void* pinned = nullptr;
  Check(cudaMallocHost(&pinned, kc::kFlashInferIntWorkspaceBytes), "pinned workspace");
  const kc::FlashInferWorkspace ws{float_ws.get(), int_ws.get(), pinned,
                                   kc::kFlashInferFloatWorkspaceBytes,
                                   kc::kFlashInferIntWorkspaceBytes};
  std::string error;
  kc::FlashInferPagedPlan plan;
  // A refusal (plan or first launch) leaves the rows out and says why, rather than ending the
  // whole run: FlashInfer is measured beside the project's kernels, not instead of them.
  auto refused = [&](const char* stage, cudaError_t e) {
    std::fprintf(stderr, "FlashInfer paged decode %s refused for %s: %s %s\n", stage, tag.c_str(),
                 cudaGetErrorString(e), error.c_str());
    Check(cudaFreeHost(pinned), "free pinned workspace");
  };
  if (const cudaError_t e =
          kc::PlanFlashInferPaged(ws, qo_indptr.data(), page_indptr.data(), s.batch, s.heads,
                                  s.kv_heads, s.head_dim, page, nullptr, &plan, &error);
      e != cudaSuccess) {
    return refused("plan", e);
  }
  kc::FlashInferPagedRun run;
  run.q = q16.get();
  run.out = out16.get();
  run.keys = keys.get();
  run.values = values.get();
  run.page_stride = int64_t{page} * c;
  run.qo_indptr = d_qo->get<int32_t>();
  run.page_indptr = d_pages->get<int32_t>();
  run.page_indices = d_idx->get<int32_t>();
  run.last_page_len = d_last->get<int32_t>();
  run.scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
  if (const cudaError_t e = kc::LaunchFlashInferPaged(run, plan, ws, nullptr, &error);
      e != cudaSuccess) {
    return refused("launch", e);
  }
  Check(cudaDeviceSynchronize(), "FlashInfer paged decode");
  const double ms = MedianMs(
      [&] {
        Check(kc::LaunchFlashInferPaged(run, plan, ws, nullptr, &error),
              ("FlashInfer paged decode " + error).c_str());
      },
      3, 20);
  Check(cudaFreeHost(pinned), "free pinned workspace");
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  res.Add("decode attention " + tag + " time", ms * 1e3, "us");
  res.Add("decode attention " + tag + " bytes read", gbps, "GB/s");
  res.Add("decode attention " + tag + " fraction of copy ceiling", gbps / copy_gbps, "fraction");
}

void Decode(Results& res, double copy_gbps, int sm_count, bool quick) {
  // Batch 1 is the one-sequence baseline of the AttentionPack section below.
  const DecodeShape shapes[] = {{14, 2, 64, 16, "Qwen2-0.5B heads 14/2 d64 batch 16"},
                                {28, 4, 128, 8, "Qwen2-7B heads 28/4 d128 batch 8"},
                                {14, 2, 64, 1, "Qwen2-0.5B heads 14/2 d64 batch 1"}};
  const int64_t ctx = quick ? 4096 : 32768;
  const int page = 32;
  for (const DecodeShape& s : shapes) {
    const int64_t c = static_cast<int64_t>(s.kv_heads) * s.head_dim;
    const int64_t tokens = ctx * s.batch, pages = tokens / page;
    DeviceBuffer kf(tokens * c * 4), vf(tokens * c * 4);
    Check(FillNormal(kf.get<float>(), tokens * c, 51, 1.f, nullptr), "fill k");
    Check(FillNormal(vf.get<float>(), tokens * c, 52, 1.f, nullptr), "fill v");
    DeviceBuffer kh(tokens * c * 2), vh(tokens * c * 2);
    for (int i = 0; i < 2; ++i) {
      kc::CastParams cp;
      cp.in = i ? vf.get() : kf.get();
      cp.out = i ? vh.get() : kh.get();
      cp.n = tokens * c;
      cp.out_kind = kc::FloatKind::kF16;
      Check(kc::LaunchCast(cp, nullptr), "cast to f16");
    }
    // int4 and int2 arenas written by the GPU quantiser (timed as a bonus figure).
    size_t qbytes[2];
    std::vector<std::unique_ptr<DeviceBuffer>> arenas;
    for (int bi = 0; bi < 2; ++bi) {
      const int bits = bi == 0 ? 4 : 2;
      const size_t pb = kc::QuantPageBytes(static_cast<int>(c), page, bits);
      const size_t stride = (pb + 255) / 256 * 256;
      qbytes[bi] = pb;
      arenas.push_back(std::make_unique<DeviceBuffer>(stride * pages));
      std::vector<void*> ptrs(static_cast<size_t>(pages));
      for (int64_t p = 0; p < pages; ++p) ptrs[p] = arenas.back()->get<char>() + p * stride;
      DeviceBuffer table(ptrs.size() * sizeof(void*));
      Check(cudaMemcpy(table.get(), ptrs.data(), table.bytes(), cudaMemcpyHostToDevice), "table");
      kc::QuantizePagesLaunch ql;
      ql.k = kf.get<float>();
      ql.v = vf.get<float>();
      ql.num_tokens = tokens;
      ql.channels = static_cast<int>(c);
      ql.page_tokens = page;
      ql.bits = bits;
      ql.pages = table.get<void* const>();
      const double ms =
          MedianMs([&] { Check(kc::LaunchQuantizePages(ql, nullptr), "quantize"); }, 1, 3);
      res.Add(std::string("quantize-and-pack int") + std::to_string(bits) + " pages " + s.label +
                  " (f32 K+V read)",
              2.0 * tokens * c * 4 / (ms * 1e-3) / 1e9, "GB/s");
    }

    DeviceBuffer q(static_cast<size_t>(s.batch) * s.heads * s.head_dim * 4);
    DeviceBuffer out(static_cast<size_t>(s.batch) * s.heads * s.head_dim * 4);
    Check(FillNormal(q.get<float>(), static_cast<int64_t>(s.batch) * s.heads * s.head_dim, 53, 1.f,
                     nullptr),
          "fill q");
    double f16_ms[2] = {0, 0};
    const char* modes[] = {"f16", "int4", "int2", "mixed int4/int2 (30% int4 pages)"};
    for (int mode = 0; mode < 4; ++mode) {
      std::vector<kc::PagedSpanDesc> descs(static_cast<size_t>(pages));
      std::vector<int32_t> span_tokens(descs.size(), page), span_offsets;
      double bytes = 0;
      std::mt19937_64 rng(7);
      std::bernoulli_distribution important(0.3);
      for (int64_t p = 0; p < pages; ++p) {
        kc::PagedSpanDesc& d = descs[p];
        d.num_tokens = page;
        int fmt = mode == 0 ? 1 : mode == 1 ? 2 : mode == 2 ? 3 : (important(rng) ? 2 : 3);
        d.format = fmt;
        if (fmt == 1) {
          d.k = kh.get<char>() + p * page * c * 2;
          d.v = vh.get<char>() + p * page * c * 2;
          bytes += 2.0 * page * c * 2;
        } else {
          const int bi = fmt == 2 ? 0 : 1;
          const int bits = fmt == 2 ? 4 : 2;
          const size_t stride = (qbytes[bi] + 255) / 256 * 256;
          char* base = arenas[bi]->get<char>() + p * stride;
          const size_t rows = static_cast<size_t>(page) * c * bits / 8;
          d.k = base;
          d.k_scale = base + rows;
          d.k_zero = base + rows + c * 2;
          d.v = base + rows + c * 4;
          d.v_scale = base + 2 * rows + c * 4;
          d.v_zero = base + 2 * rows + c * 4 + static_cast<size_t>(page) * (c / 32) * 2;
          d.v_param_stride = page;
          bytes += static_cast<double>(qbytes[bi]);
        }
      }
      for (int b = 0; b <= s.batch; ++b)
        span_offsets.push_back(static_cast<int32_t>(b * (ctx / page)));
      std::vector<kc::PagedWorkItem> items;
      std::vector<int32_t> item_offsets;
      kc::BuildPagedWorkItems(span_tokens.data(), span_offsets.data(), s.batch,
                              kc::ChoosePagedTokensPerItem(tokens, s.kv_heads, s.heads, sm_count),
                              items, item_offsets);
      DeviceBuffer ddesc(descs.size() * sizeof(kc::PagedSpanDesc));
      DeviceBuffer ditems(items.size() * sizeof(kc::PagedWorkItem));
      DeviceBuffer doffs(item_offsets.size() * 4);
      DeviceBuffer ws(
          kc::PagedDecodeWorkspaceFloats(static_cast<int32_t>(items.size()), s.heads, s.head_dim) *
          4);
      Check(cudaMemcpy(ddesc.get(), descs.data(), ddesc.bytes(), cudaMemcpyHostToDevice), "descs");
      Check(cudaMemcpy(ditems.get(), items.data(), ditems.bytes(), cudaMemcpyHostToDevice),
            "items");
      Check(cudaMemcpy(doffs.get(), item_offsets.data(), doffs.bytes(), cudaMemcpyHostToDevice),
            "offsets");
      kc::PagedDecodeLaunch pl;
      pl.q = q.get<float>();
      pl.out = out.get<float>();
      pl.spans = ddesc.get<kc::PagedSpanDesc>();
      pl.items = ditems.get<kc::PagedWorkItem>();
      pl.item_offsets = doffs.get<int32_t>();
      pl.num_items = static_cast<int32_t>(items.size());
      pl.workspace = ws.get<float>();
      pl.batch = s.batch;
      pl.heads = s.heads;
      pl.kv_heads = s.kv_heads;
      pl.head_dim = s.head_dim;
      pl.scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
      for (int variant = 0; variant < 2; ++variant) {  // CUDA-core FMAs, then tensor cores
        pl.tensor_cores = variant == 1;
        const double ms = MedianMs(
            [&] { Check(kc::LaunchPagedDecodeAttention(pl, nullptr), "paged decode"); }, 3, 20);
        const double gbps = bytes / (ms * 1e-3) / 1e9;
        const std::string kernel = variant == 1 ? " [tensor cores]" : " [cuda cores]";
        const std::string tag =
            std::string(s.label) + " ctx " + std::to_string(ctx) + " " + modes[mode] + kernel;
        res.Add("decode attention " + tag + " time", ms * 1e3, "us");
        res.Add("decode attention " + tag + " bytes read", gbps, "GB/s");
        res.Add("decode attention " + tag + " fraction of copy ceiling", gbps / copy_gbps,
                "fraction", mode == 3 ? 0.6 : 0);
        if (mode == 0) f16_ms[variant] = ms;
        if (mode == 0 && variant == 1) {
          FlashInferPagedDecode(
              res, std::string(s.label) + " ctx " + std::to_string(ctx) + " f16 [FlashInfer]", s,
              ctx, page, kh, vh, q, bytes, copy_gbps);
        }
        if (mode == 0 && variant == 1 && s.batch == 1) g_dense_one_sequence_us = ms * 1e3;
        if (mode == 3) {
          res.Add("decode attention " + std::string(s.label) + " mixed int4/int2 speedup vs f16" +
                      kernel,
                  f16_ms[variant] / ms, "x", 2.0);
        }
      }
    }
  }
}

// ---- AttentionPack: decode over a low-rank visual block ----------------------------------------

// One sequence of `ctx` visual tokens in a low-rank block (Qwen2-0.5B heads: 14 query, 2 KV, d 64,
// HD 128; ranks R_k = R_v = 32 = HD/4, values 25% at full rank and the rest at R/4, as the
// policy's defaults), factors packed on the GPU from random f32; the fused kernel pair against
// dense f16 paged decode of the same context (the batch-1 row of Decode).
void AttentionPack(Results& res, bool quick) {
  const int heads = 14, kv_heads = 2, d = 64, rank = 32;
  const int64_t ctx = quick ? 4096 : 32768, hd = int64_t{kv_heads} * d;
  DeviceBuffer us_k(ctx * rank * 4), vt_k(rank * hd * 4), us_v(ctx * rank * 4), vt_v(rank * hd * 4);
  Check(FillNormal(us_k.get<float>(), ctx * rank, 61, 1.f, nullptr), "fill us_k");
  Check(FillNormal(vt_k.get<float>(), rank * hd, 62, 0.2f, nullptr), "fill vt_k");
  Check(FillNormal(us_v.get<float>(), ctx * rank, 63, 1.f, nullptr), "fill us_v");
  Check(FillNormal(vt_v.get<float>(), rank * hd, 64, 0.2f, nullptr), "fill vt_v");
  std::vector<int32_t> positions(static_cast<size_t>(ctx));
  std::vector<uint16_t> ranks(static_cast<size_t>(ctx));
  std::mt19937_64 rng(9);
  std::bernoulli_distribution top(0.25);
  for (int64_t t = 0; t < ctx; ++t) {
    positions[t] = static_cast<int32_t>(t + 20);  // after a short text prefix
    ranks[t] = static_cast<uint16_t>(top(rng) ? rank : rank / 4);
  }
  std::vector<float> inv_freq(static_cast<size_t>(d / 2));
  for (int c = 0; c < d / 2; ++c) inv_freq[c] = std::pow(1e6f, -2.f * c / d);  // Qwen2 θ = 1e6
  DeviceBuffer dpos(positions.size() * 4), dranks(ranks.size() * 2), dfreq(inv_freq.size() * 4);
  Check(cudaMemcpy(dpos.get(), positions.data(), dpos.bytes(), cudaMemcpyHostToDevice), "pos");
  Check(cudaMemcpy(dranks.get(), ranks.data(), dranks.bytes(), cudaMemcpyHostToDevice), "ranks");
  Check(cudaMemcpy(dfreq.get(), inv_freq.data(), dfreq.bytes(), cudaMemcpyHostToDevice), "freq");
  DeviceBuffer q(heads * d * 4), out(heads * d * 4), mx(heads * 4), sum(heads * 4);
  DeviceBuffer weights(heads * ctx * 4);
  DeviceBuffer scratch(kc::LowRankAttendScratchFloats(ctx, heads, rank) * 4);
  Check(FillNormal(q.get<float>(), heads * d, 65, 1.f, nullptr), "fill q");

  const char* formats[] = {"f16", "int4"};
  for (int fi = 0; fi < 2; ++fi) {
    const int format = fi == 0 ? kc::DeviceFactor::kF16 : kc::DeviceFactor::kInt4;
    // Each factor packed into its own buffers: values (f16 or int4 bytes) and int4 scales.
    std::vector<std::unique_ptr<DeviceBuffer>> keep;
    double bytes = 0;
    const auto pack = [&](const DeviceBuffer& src, int64_t rows, int64_t cols) {
      kc::EncodeFactorLaunch e;
      e.values = src.get<float>();
      e.rows = rows;
      e.cols = cols;
      e.format = format;
      const size_t data_bytes = format == kc::DeviceFactor::kF16
                                    ? static_cast<size_t>(rows * cols) * 2
                                    : static_cast<size_t>(rows * cols + 1) / 2;
      const size_t scale_bytes = static_cast<size_t>((rows + 31) / 32 * cols) * 2;
      keep.push_back(std::make_unique<DeviceBuffer>(data_bytes));
      keep.push_back(std::make_unique<DeviceBuffer>(scale_bytes));
      e.f16 = keep[keep.size() - 2]->get<uint16_t>();
      e.packed = keep[keep.size() - 2]->get<uint8_t>();
      e.scales = keep.back()->get<uint16_t>();
      Check(kc::LaunchEncodeFactor(e, nullptr), "pack factor");
      bytes +=
          static_cast<double>(data_bytes) + (format == kc::DeviceFactor::kInt4 ? scale_bytes : 0);
      kc::DeviceFactor f;
      f.format = format;
      f.rows = rows;
      f.cols = cols;
      f.f16 = e.f16;
      f.packed = e.packed;
      f.scales = e.scales;
      return f;
    };
    kc::LowRankAttendLaunch p;
    p.key_us = pack(us_k, ctx, rank);
    p.key_vt = pack(vt_k, rank, hd);
    p.value_us = pack(us_v, ctx, rank);
    p.value_vt = pack(vt_v, rank, hd);
    p.q = q.get<float>();
    p.positions = dpos.get<int32_t>();
    p.value_ranks = dranks.get<uint16_t>();
    p.inv_freq = dfreq.get<float>();
    p.tokens = ctx;
    p.heads = heads;
    p.kv_heads = kv_heads;
    p.head_dim = d;
    p.scale = 1.f / std::sqrt(static_cast<float>(d));
    p.weights = weights.get<float>();
    p.max = mx.get<float>();
    p.sum = sum.get<float>();
    p.out = out.get<float>();
    p.scratch = scratch.get<float>();
    const double ms =
        MedianMs([&] { Check(kc::LaunchLowRankAttend(p, nullptr), "low-rank"); }, 3, 20);
    const std::string tag = std::string("AttentionPack decode, one sequence, ctx ") +
                            std::to_string(ctx) + " visual tokens, rank 32 " + formats[fi] +
                            " factors";
    res.Add(tag + " time", ms * 1e3, "us");
    res.Add(tag + " factor bytes vs f16 K+V", 2.0 * ctx * hd * 2 / bytes, "x");
    if (g_dense_one_sequence_us > 0) {
      res.Add(tag + " speed vs dense f16 paged decode [tensor cores]",
              g_dense_one_sequence_us / (ms * 1e3), "x", 0.8);
    }
  }
}

}  // namespace

int RunGpuBench(const std::vector<std::string>& args) {
  bool json = false, quick = false;
  for (const std::string& a : args) {
    if (a == "--json") {
      json = true;
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--help" || a == "-h") {
      std::printf(
          "usage: framezip bench gpu [--json] [--quick]\n"
          "  GPU ceilings (copy GB/s, cuBLAS bf16 GEMM), dense vs ZipVL sparse prefill attention\n"
          "  at 4k/16k/32k tokens, paged decode attention at 32k over f16/int4/int2/mixed KV,\n"
          "  AttentionPack's fused low-rank decode at 32k (f16 and int4 factors) against dense "
          "f16,\n"
          "  then the Qwen2-0.5B shape end to end (prefill, decode at batch 1/16/64 over a 4k "
          "context, tokens/s,\n"
          "  and a batch-16 step's launches, host synchronisations and copies; llm::Decoder on "
          "the GPU) and\n"
          "  OV's SigLIP-so400m vision tower (frames/s).\n"
          "  --quick: 4k prefill and 4k decode only (a smoke run). --json: JSON last line.\n");
      return 0;
    } else {
      std::fprintf(stderr, "framezip bench gpu: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "framezip bench gpu: no usable GPU (%s)\n",
                 cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  char mem[32];
  std::snprintf(mem, sizeof(mem), "%.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  const std::string gpu = std::string(prop.name) + ", sm_" + std::to_string(prop.major) +
                          std::to_string(prop.minor) + ", " +
                          std::to_string(prop.multiProcessorCount) + " SMs, " + mem;
  std::printf("framezip bench gpu on %s%s\n", gpu.c_str(), quick ? " (quick)" : "");
  Results res;
  const double copy = CopyGbps(res);
  GemmTflops(res);
  Prefill(res, quick);
  Decode(res, copy, prop.multiProcessorCount, quick);
  AttentionPack(res, quick);
  // A failure of the end-to-end section (printed by it) still leaves the kernel figures above
  // in the JSON; the exit status says it failed.
  const std::vector<E2eRow> e2e = ModelEndToEnd(copy, quick);
  for (const E2eRow& r : e2e) res.Add(r.name, r.value, r.unit);
  const std::vector<E2eRow> vision = VisionEndToEnd(quick);
  for (const E2eRow& r : vision) res.Add(r.name, r.value, r.unit);
  // Only on sm_90 (it says so elsewhere); its failure leaves the rows above.
  for (const E2eRow& r : Fp8DecodeEndToEnd(quick)) res.Add(r.name, r.value, r.unit);
  if (json) {
    std::printf(
        "%s\n",
        res.Json(gpu, CpuModel(),
                 "dense prefill: f32 CUDA-core kernel (attention.cuh), bf16 tensor-core "
                 "kernel (attention_mma.cuh) and FlashInfer's FA2 prefill where built; ZipVL "
                 "sparse prefill runs the f32 kernel on the kept rows and is compared with "
                 "the f32 dense; ZipVL scores come from "
                 "the probe kernel on random-but-structured synthetic "
                 "activations (15% salient tokens), not the tiny model's; end-to-end rows: "
                 "llm::Decoder (policy none) with random bf16 weights, f32 activations and KV, "
                 "prefill attention on bf16 tensor cores (FlashInfer where built and the "
                 "head size is 64 or 128, else the pipelined kernel), "
                 "greedy tokens picked on the device (ops::SampleTokens); vision row: "
                 "vision::VisionTowerHiddenStates with random bf16 weights on the GPU, "
                 "host pixels in, last hidden state back to the host")
            .c_str());
  }
  return e2e.empty() || vision.empty() ? 1 : 0;
}

}  // namespace framezip::benchgpu
