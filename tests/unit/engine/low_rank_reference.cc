#include "tests/unit/engine/low_rank_reference.h"

#include <algorithm>
#include <cmath>

#include "tests/testing/random.h"

namespace framezip::engine::ops::reference {

Columns RandomOrthonormal(int64_t m, int64_t k, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Columns x(static_cast<size_t>(k), std::vector<double>(static_cast<size_t>(m)));
  for (size_t j = 0; j < x.size(); ++j) {
    for (double& v : x[j]) v = normal(rng);
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < j; ++i) {
        double dot = 0;
        for (int64_t r = 0; r < m; ++r) dot += x[i][r] * x[j][r];
        for (int64_t r = 0; r < m; ++r) x[j][r] -= dot * x[i][r];
      }
    }
    double norm = 0;
    for (double v : x[j]) norm += v * v;
    for (double& v : x[j]) v /= std::sqrt(norm);
  }
  return x;
}

std::vector<double> GappedSpectrum(int64_t k, int64_t rank) {
  std::vector<double> sigma(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) sigma[i] = 3.0 * std::pow(0.95, i) * (i < rank ? 1.0 : 0.05);
  return sigma;
}

std::vector<double> MatrixWithSpectrum(int64_t m, int64_t n, const std::vector<double>& sigma,
                                       std::mt19937_64& rng) {
  const int64_t k = static_cast<int64_t>(sigma.size());
  const Columns x = RandomOrthonormal(m, k, rng), y = RandomOrthonormal(n, k, rng);
  std::vector<double> a(static_cast<size_t>(m * n), 0.0);
  for (int64_t l = 0; l < k; ++l) {
    for (int64_t i = 0; i < m; ++i) {
      const double s = sigma[l] * x[l][i];
      for (int64_t j = 0; j < n; ++j) a[i * n + j] += s * y[l][j];
    }
  }
  return a;
}

std::vector<float> ToFloat(const std::vector<double>& x) { return {x.begin(), x.end()}; }

double ReconstructionError2(const std::vector<double>& a, const LowRankFactors& f) {
  double err = 0;
  for (int64_t i = 0; i < f.rows; ++i) {
    for (int64_t j = 0; j < f.cols; ++j) {
      double v = 0;
      for (int l = 0; l < f.rank; ++l) v += double{f.us[i * f.rank + l]} * f.vt[l * f.cols + j];
      err += (a[i * f.cols + j] - v) * (a[i * f.cols + j] - v);
    }
  }
  return err;
}

double OrthonormalityError(const LowRankFactors& f) {
  double worst = 0;
  for (int i = 0; i < f.rank; ++i) {
    for (int j = 0; j < f.rank; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < f.cols; ++c) {
        dot += double{f.vt[i * f.cols + c]} * f.vt[j * f.cols + c];
      }
      worst = std::max(worst, std::fabs(dot - (i == j ? 1.0 : 0.0)));
    }
  }
  return worst;
}

Factors MixedRankFactors(int64_t tokens, int rank, int64_t hd, std::mt19937_64& rng) {
  Factors f;
  f.us = testing::RandomNormal(static_cast<size_t>(tokens * rank), rng);
  f.vt = testing::RandomNormal(static_cast<size_t>(rank * hd), rng);
  f.ranks.assign(static_cast<size_t>(tokens), rank / 4);
  std::fill(f.ranks.begin(), f.ranks.begin() + (tokens + 3) / 4, rank);
  std::shuffle(f.ranks.begin(), f.ranks.end(), rng);
  if (tokens > 2) f.ranks[static_cast<size_t>(tokens / 2)] = 0;
  return f;
}

std::vector<double> RebuiltRow(const Factors& f, int64_t t, int rank, int64_t hd) {
  std::vector<double> row(static_cast<size_t>(hd), 0.0);
  for (int j = 0; j < f.ranks[t]; ++j) {
    for (int64_t c = 0; c < hd; ++c) row[c] += double{f.us[t * rank + j]} * f.vt[j * hd + c];
  }
  return row;
}

void RotateHalfSplit(std::vector<double>& x, int32_t pos, const std::vector<float>& inv_freq) {
  const size_t half = x.size() / 2;
  for (size_t i = 0; i < half; ++i) {
    const double angle = static_cast<float>(pos) * inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle), a = x[i], b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = b * c + a * s;
  }
}

RopeParams MakeRope(int d, bool llama3) {
  RopeParams rope{.head_dim = d};
  if (llama3) {
    rope.theta = 500000;
    rope.llama3_factor = 8;
  }
  return rope;
}

StoredFactor Store(const std::vector<float>& x, int64_t rows, int64_t cols, int format) {
  StoredFactor f;
  f.rows = rows;
  f.cols = cols;
  f.is_f32 = format == 0;
  if (f.is_f32) {
    f.values = x;
    return f;
  }
  f.stored = kv::LowRankFactor::Encode(
      x, rows, cols, format == 1 ? kv::FactorFormat::kF16 : kv::FactorFormat::kInt4);
  f.values = f.stored.Decode();
  return f;
}

StoredBlock RandomStoredBlock(int64_t tokens, int rank_k, int rank_v, int64_t hd, int format,
                              std::mt19937_64& rng) {
  StoredBlock b;
  b.us_k = Store(testing::RandomNormal(static_cast<size_t>(tokens * rank_k), rng), tokens, rank_k,
                 format);
  b.vt_k = Store(testing::RandomNormal(static_cast<size_t>(rank_k * hd), rng), rank_k, hd, format);
  const Factors mixed = MixedRankFactors(tokens, rank_v, hd, rng);
  b.us_v = Store(mixed.us, tokens, rank_v, format);
  b.vt_v = Store(mixed.vt, rank_v, hd, format);
  b.value_ranks = mixed.ranks;
  return b;
}

std::vector<int32_t> RunsOfPositions(int64_t tokens, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> jump(2, 900), start(0, 20000);
  std::bernoulli_distribution breaks(0.03);
  std::vector<int32_t> positions(static_cast<size_t>(tokens));
  int32_t p = start(rng);
  for (int32_t& pos : positions) {
    pos = p;
    p += breaks(rng) ? jump(rng) : 1;
  }
  return positions;
}

Reference AttendInDouble(const std::vector<float>& q, const std::vector<float>& us_k,
                         const std::vector<float>& vt_k, int rank_k, const Factors& values,
                         int rank_v, const std::vector<int32_t>& positions, int heads, int kv_heads,
                         int d, const RopeParams& rope, double scale) {
  const int64_t tokens = static_cast<int64_t>(positions.size()), hd = int64_t{kv_heads} * d;
  const int64_t group = heads / kv_heads;
  const std::vector<float> inv_freq = RopeInverseFrequencies(rope);
  Factors keys{us_k, vt_k, std::vector<uint16_t>(static_cast<size_t>(tokens), rank_k)};
  Reference r;
  r.s.resize(static_cast<size_t>(heads * tokens));
  r.max.assign(static_cast<size_t>(heads), -1e300);
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<double> row = RebuiltRow(keys, t, rank_k, hd);
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> k(row.begin() + h / group * d, row.begin() + (h / group + 1) * d);
      RotateHalfSplit(k, positions[t], inv_freq);
      double dot = 0, qq = 0, kk = 0;
      for (int64_t c = 0; c < d; ++c) {
        dot += q[h * d + c] * k[c];
        qq += double{q[h * d + c]} * q[h * d + c];
        kk += k[c] * k[c];
      }
      // The reference rounds each angle to f32 as HF does (position · inv_freq in f32); the kernel
      // carries a run's angles from tile to tile by rotation, which lands within half an f32 ulp
      // of that rounded angle, not on it. Turning channel pair c by δ_c moves the score by at
      // most δ_c·|q_c|·|k_c| (the pair's norms): allowed on top of the f32 arithmetic's 1e-4.
      double turn = 0;
      const int64_t half = d / 2;
      for (int64_t c = 0; c < half; ++c) {
        const double angle = static_cast<double>(positions[t]) * inv_freq[c];
        const double qn = std::hypot(double{q[h * d + c]}, double{q[h * d + c + half]});
        const double kn = std::hypot(k[c], k[c + half]);
        turn += std::ldexp(angle, -24) * qn * kn;
      }
      r.s[h * tokens + t] = scale * dot;
      r.max[h] = std::max(r.max[h], scale * dot);
      // Relative to the dot product's own scale, so scores near zero are held to it too.
      r.score_tol = std::max(r.score_tol, scale * (1e-4 * std::sqrt(qq * kk) + turn));
    }
  }
  r.sum.assign(static_cast<size_t>(heads), 0.0);
  r.out.assign(static_cast<size_t>(heads * d), 0.0);
  r.out_mass.assign(static_cast<size_t>(heads * d), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<double> v = RebuiltRow(values, t, rank_v, hd);
    for (int64_t h = 0; h < heads; ++h) {
      const double w = std::exp(r.s[h * tokens + t] - r.max[h]);
      r.sum[h] += w;
      for (int64_t c = 0; c < d; ++c) {
        r.out[h * d + c] += w * v[h / group * d + c];
        r.out_mass[h * d + c] += w * std::fabs(v[h / group * d + c]);
      }
    }
  }
  return r;
}

}  // namespace framezip::engine::ops::reference
