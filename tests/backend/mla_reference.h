// The absorbed MLA attention of one (token, head) in float64 (MlaAbsorbQuery, MlaAttention and
// MlaProjectValue of the CPU engine, without their roundings), and the error bound of the
// expanded form the CUDA backend computes for prefill (Backend::MlaExpandedAttention) against it.
// Header-only: the device conformance suite and the host emulation of the kernels share it.
#ifndef LLMRT_TESTS_BACKEND_MLA_REFERENCE_H_
#define LLMRT_TESTS_BACKEND_MLA_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace llmrt::testing_mla {

struct Dims {
  int64_t nope, rope, v, kv_lora;
};

// What the error bound below needs of one context row c (as read) for one head: the magnitudes
// of its expanded key's products (key[i] = sum_k |W_UK[i, k] c_k|, i < nope) and the largest of
// its expanded values' (value = max_j sum_k |W_UV[j, k] c_k|). kv_b_head: the head's
// (nope + v) x kv_lora block of kv_b (W_UK's rows, then W_UV's).
struct RowMagnitudes {
  std::vector<double> key;
  double value = 0;
};
inline RowMagnitudes Magnitudes(const float* kv_b_head, const float* c, const Dims& d) {
  const int64_t L = d.kv_lora;
  RowMagnitudes m;
  m.key.assign(static_cast<size_t>(d.nope), 0.0);
  for (int64_t i = 0; i < d.nope + d.v; ++i) {
    double x = 0;
    for (int64_t k = 0; k < L; ++k) x += std::fabs(static_cast<double>(kv_b_head[i * L + k]) * c[k]);
    if (i < d.nope) {
      m.key[i] = x;
    } else {
      m.value = std::max(m.value, x);
    }
  }
  return m;
}

// out[j] (j < v) = W_UV(h) sum_p softmax_p(score) c_p, score = (W_UK(h)^T q_nope) . c_p +
// q_rope . kr_p, times `scale`. q: the head's nope + rope values; rows[p]: the context's values
// as read ([c (kv_lora) | kr (rope)]), mags[p] their Magnitudes for this head.
//
// *tol bounds the expanded form's error: it rounds the query, the latent, the expanded keys and
// values and the probabilities to bfloat16 (2^-9 relative each), which moves a score by at most
// 2^-7 of the sum of its products' magnitudes (M: the largest over the context, in the expanded
// form's products), so each probability by a factor within exp(+-2 * 2^-7 M), and the output by
// that times the largest |value| (Vb), plus 2^-7 Vb for the values' own roundings and float32's
// sums. A rigorous bound, and loose: every rounding at its worst, in the same direction.
inline void AbsorbedMla(const float* q, const float* kv_b_head, const std::vector<const float*>& rows,
                        const std::vector<const RowMagnitudes*>& mags, const Dims& d, double scale, double* out,
                        double* tol) {
  const int64_t L = d.kv_lora, n = static_cast<int64_t>(rows.size());
  std::vector<double> qlat(static_cast<size_t>(L), 0.0);
  for (int64_t i = 0; i < d.nope; ++i) {
    for (int64_t k = 0; k < L; ++k) qlat[k] += static_cast<double>(q[i]) * kv_b_head[i * L + k];
  }
  std::vector<double> s(static_cast<size_t>(n));
  double mx = -INFINITY, mag_max = 0, vb = 0;
  for (int64_t p = 0; p < n; ++p) {
    const float* c = rows[p];
    double dot = 0, mag = 0;
    for (int64_t k = 0; k < L; ++k) dot += qlat[k] * c[k];
    for (int64_t i = 0; i < d.nope; ++i) mag += std::fabs(static_cast<double>(q[i])) * mags[p]->key[i];
    for (int64_t i = 0; i < d.rope; ++i) {
      dot += static_cast<double>(q[d.nope + i]) * c[L + i];
      mag += std::fabs(static_cast<double>(q[d.nope + i]) * c[L + i]);
    }
    vb = std::max(vb, mags[p]->value);
    s[p] = dot * scale;
    mag_max = std::max(mag_max, mag * std::fabs(scale));
    mx = std::max(mx, s[p]);
  }
  double l = 0;
  for (double& x : s) l += (x = std::exp(x - mx));
  std::vector<double> olat(static_cast<size_t>(L), 0.0);
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t k = 0; k < L; ++k) olat[k] += s[p] / l * rows[p][k];
  }
  for (int64_t j = 0; j < d.v; ++j) {
    double o = 0;
    for (int64_t k = 0; k < L; ++k) o += static_cast<double>(kv_b_head[(d.nope + j) * L + k]) * olat[k];
    out[j] = n > 0 ? o : 0.0;
  }
  *tol = (std::exp(2 * 0x1p-7 * mag_max) - 1) * vb + 0x1p-7 * vb + 1e-5;
}

}  // namespace llmrt::testing_mla

#endif  // LLMRT_TESTS_BACKEND_MLA_REFERENCE_H_
