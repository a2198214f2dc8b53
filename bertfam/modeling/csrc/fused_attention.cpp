// softmax(q kᵀ · scale) v inside each sequence of a packed batch, in one pass per (sequence, head): the
// scores of a block of query rows stay in L1 (fp32), the softmax is computed there and multiplied into V at
// once, so no (T, T) score matrix and no layout copies of q, k, v. Built by bertfam/modeling/fused_attention.py
// (torch.utils.cpp_extension) in one of two variants: with -mavx512* (__AVX512F__: float32 and, where the CPU
// has AVX512_BF16's dot products, bfloat16; 16 lanes) or with -mavx2 -mfma (float32 only, 8 lanes).
//
// qkv: (N, 3, h, D) packed real tokens (row t of sequence b is token cu[b] + t), contiguous, float32 or
// bfloat16; D = 32 or 64. out: (N, h, D), same dtype. Scores, softmax and the PV sums are fp32 in both.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace {

constexpr int RB = 8;  // query rows per block: 8 rows x 2 key vectors = 16 accumulators in QKᵀ

struct Scratch {
  std::vector<float> kp, vp, s;  // packed K and V (as 32-bit words), RB rows of scores
  std::vector<uint16_t> p;       // RB rows of bf16 probabilities
  Scratch(int max_len, int D) {
    const int nb = (max_len + 15) / 16;
    kp.resize((size_t)nb * 16 * D + 16);
    vp.resize((size_t)(max_len + 1) / 2 * 2 * D + 16 * D);
    s.resize((size_t)RB * nb * 16);
    p.resize((size_t)RB * nb * 16 + 32);
  }
};

#if defined(__AVX512F__)

// e^x for x <= 0 (scores minus their row's max): 2^n · 2^f, f in [-0.5, 0.5] by a degree-6 polynomial
// (relative error ~2e-7), 2^n by scalef; below -87 it flushes towards 0 as expf does
inline __m512 exp_ps(__m512 x) {
  // n = round(t) by the 1.5 · 2^23 trick (its low bits then hold n as an integer), 2^n by adding n to the
  // exponent bits: cheaper than roundscale / scalef, exact for the clamped range
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), magic);
  __m512 n = _mm512_sub_ps(t, magic);
  __m512 f = _mm512_fmsub_ps(x, _mm512_set1_ps(1.44269504088896341f), n);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  __m512i e = _mm512_slli_epi32(_mm512_castps_si512(t), 23);  // n in the low bits of t, shifted to the exponent
  return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
}

inline __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1u); }

// One row of L scores in place: e = exp(scale · (s − max)), written over s (fp32) and, for the bf16 kernel,
// as bf16 into p (zero past L up to the next even count); returns Σ e.
template <bool BF16>
inline float softmax_row(float* s, int L, float scale, uint16_t* p) {
  __m512 vmax = _mm512_set1_ps(-INFINITY);
  int j = 0;
  for (; j + 16 <= L; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  if (j < L) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(L - j), s + j));
  const __m512 vs = _mm512_set1_ps(scale), vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmax) * scale);
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j < L; j += 16) {
    __mmask16 m = L - j >= 16 ? (__mmask16)0xFFFF : tail_mask(L - j);
    __m512 e = _mm512_maskz_mov_ps(m, exp_ps(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, s + j), vs, vm)));
    vsum = _mm512_add_ps(vsum, e);
    if (BF16) _mm256_storeu_si256((__m256i*)(p + j), (__m256i)_mm512_cvtneps_pbh(e));  // p has room past L
    else _mm512_storeu_ps(s + j, e);  // s rows are padded to whole vectors
  }
  return _mm512_reduce_add_ps(vsum);
}

// ------------------------------------------------------------------------------------------- bfloat16
// K of one (sequence, head) as [key block of 16][pair i][lane = key]: a uint32 = (k[2i], k[2i+1]), zero keys
// past L (their scores are never read)
template <int D>
void pack_k_bf16(const uint16_t* k, int64_t stride, int L, uint32_t* kp) {
  constexpr int DP = D / 2;
  const int nb = (L + 15) / 16;
  std::memset(kp, 0, sizeof(uint32_t) * nb * DP * 16);
  for (int j = 0; j < L; ++j) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(k + j * stride);
    uint32_t* dst = kp + (j / 16) * DP * 16 + (j % 16);
    for (int i = 0; i < DP; ++i) dst[i * 16] = src[i];
  }
}

// V as [key pair s][d]: a uint32 = (v[2s][d], v[2s+1][d]); an odd last key pairs with zeros
template <int D>
void pack_v_bf16(const uint16_t* v, int64_t stride, int L, uint32_t* vp) {
  for (int s = 0; s < (L + 1) / 2; ++s) {
    const uint16_t* a = v + (2 * s) * stride;
    const bool pair = 2 * s + 1 < L;
    for (int c = 0; c < D / 16; ++c) {
      __m512i ia = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(a + 16 * c)));
      __m512i ib = pair ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(a + stride + 16 * c)))
                        : _mm512_setzero_si512();
      _mm512_storeu_si512(vp + s * D + 16 * c, _mm512_or_si512(ia, _mm512_slli_epi32(ib, 16)));
    }
  }
}

// s[r][j] = q_r · k_j for R rows (stride apart) and every key block
template <int R, int D>
inline void qk_bf16(const uint16_t* q, int64_t stride, const uint32_t* kp, int nb, float* s, int ld) {
  constexpr int DP = D / 2;
  const uint32_t* qr[R];
  for (int r = 0; r < R; ++r) qr[r] = reinterpret_cast<const uint32_t*>(q + r * stride);
  int jb = 0;
  for (; jb + 2 <= nb; jb += 2) {
    __m512 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const uint32_t* k0 = kp + jb * DP * 16;
    for (int i = 0; i < DP; ++i) {
      __m512bh b0 = (__m512bh)_mm512_loadu_si512(k0 + i * 16);
      __m512bh b1 = (__m512bh)_mm512_loadu_si512(k0 + DP * 16 + i * 16);
      for (int r = 0; r < R; ++r) {
        __m512bh a = (__m512bh)_mm512_set1_epi32(qr[r][i]);
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, b1);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(s + r * ld + jb * 16, acc[r][0]);
      _mm512_storeu_ps(s + r * ld + jb * 16 + 16, acc[r][1]);
    }
  }
  for (; jb < nb; ++jb) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const uint32_t* k0 = kp + jb * DP * 16;
    for (int i = 0; i < DP; ++i) {
      __m512bh b0 = (__m512bh)_mm512_loadu_si512(k0 + i * 16);
      for (int r = 0; r < R; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32(qr[r][i]), b0);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(s + r * ld + jb * 16, acc[r]);
  }
}

// out_r = (p_r · V) · inv_r for R rows of bf16 probabilities (pairs of keys as uint32)
template <int R, int D>
inline void pv_bf16(const uint16_t* p, int ldp, const uint32_t* vp, int np, const float* inv, uint16_t* out,
                    int64_t ostride) {
  constexpr int C = D / 16;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  const uint32_t* pr[R];
  for (int r = 0; r < R; ++r) pr[r] = reinterpret_cast<const uint32_t*>(p + r * ldp);
  for (int s = 0; s < np; ++s) {
    __m512bh b[C];
    for (int c = 0; c < C; ++c) b[c] = (__m512bh)_mm512_loadu_si512(vp + s * D + 16 * c);
    for (int r = 0; r < R; ++r) {
      __m512bh a = (__m512bh)_mm512_set1_epi32(pr[r][s]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], a, b[c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      _mm256_storeu_si256((__m256i*)(out + r * ostride + 16 * c),
                          (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(acc[r][c], _mm512_set1_ps(inv[r]))));
}

template <int D>
void head_bf16(const uint16_t* q, int64_t stride, int64_t kv_off, int L, float scale, uint16_t* out,
               int64_t ostride, Scratch& w) {
  const int nb = (L + 15) / 16, np = (L + 1) / 2, ld = nb * 16;
  uint32_t* kp = reinterpret_cast<uint32_t*>(w.kp.data());
  uint32_t* vp = reinterpret_cast<uint32_t*>(w.vp.data());
  float* s = w.s.data();
  uint16_t* p = w.p.data();
  pack_k_bf16<D>(q + kv_off, stride, L, kp);
  pack_v_bf16<D>(q + 2 * kv_off, stride, L, vp);
  float inv[RB];
  for (int r0 = 0; r0 < L; r0 += RB) {
    const int R = std::min(RB, L - r0);
    const uint16_t* qb = q + r0 * stride;
    if (R == RB) qk_bf16<RB, D>(qb, stride, kp, nb, s, ld);
    else for (int r = 0; r < R; ++r) qk_bf16<1, D>(qb + r * stride, stride, kp, nb, s + r * ld, ld);
    for (int r = 0; r < R; ++r) {
      inv[r] = 1.0f / softmax_row<true>(s + r * ld, L, scale, p + r * ld);
      if (L & 1) p[r * ld + L] = 0;  // the odd last key's partner (a zero V row) gets weight 0
    }
    uint16_t* o = out + r0 * ostride;
    int r = 0;
    for (; r + 4 <= R; r += 4) pv_bf16<4, D>(p + r * ld, ld, vp, np, inv + r, o + r * ostride, ostride);
    for (; r < R; ++r) pv_bf16<1, D>(p + r * ld, ld, vp, np, inv + r, o + r * ostride, ostride);
  }
}

// ------------------------------------------------------------------------------------------- float32
// K as [key block of 16][d][lane = key]
template <int D>
void pack_k_f32(const float* k, int64_t stride, int L, float* kp) {
  const int nb = (L + 15) / 16;
  std::memset(kp, 0, sizeof(float) * nb * D * 16);
  for (int j = 0; j < L; ++j) {
    const float* src = k + j * stride;
    float* dst = kp + (j / 16) * D * 16 + (j % 16);
    for (int d = 0; d < D; ++d) dst[d * 16] = src[d];
  }
}

template <int R, int D>
inline void qk_f32(const float* q, int64_t stride, const float* kp, int nb, float* s, int ld) {
  const float* qr[R];
  for (int r = 0; r < R; ++r) qr[r] = q + r * stride;
  int jb = 0;
  for (; jb + 2 <= nb; jb += 2) {
    __m512 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    const float* k0 = kp + jb * D * 16;
    for (int d = 0; d < D; ++d) {
      __m512 b0 = _mm512_loadu_ps(k0 + d * 16), b1 = _mm512_loadu_ps(k0 + D * 16 + d * 16);
      for (int r = 0; r < R; ++r) {
        __m512 a = _mm512_set1_ps(qr[r][d]);
        acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(s + r * ld + jb * 16, acc[r][0]);
      _mm512_storeu_ps(s + r * ld + jb * 16 + 16, acc[r][1]);
    }
  }
  for (; jb < nb; ++jb) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    const float* k0 = kp + jb * D * 16;
    for (int d = 0; d < D; ++d) {
      __m512 b0 = _mm512_loadu_ps(k0 + d * 16);
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(qr[r][d]), b0, acc[r]);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(s + r * ld + jb * 16, acc[r]);
  }
}

// out_r = (e_r · V) · inv_r, V read in place (rows `stride` apart)
template <int R, int D>
inline void pv_f32(const float* e, int lde, const float* v, int64_t stride, int L, const float* inv, float* out,
                   int64_t ostride) {
  constexpr int C = D / 16;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int j = 0; j < L; ++j) {
    __m512 b[C];
    for (int c = 0; c < C; ++c) b[c] = _mm512_loadu_ps(v + j * stride + 16 * c);
    for (int r = 0; r < R; ++r) {
      __m512 a = _mm512_set1_ps(e[r * lde + j]);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      _mm512_storeu_ps(out + r * ostride + 16 * c, _mm512_mul_ps(acc[r][c], _mm512_set1_ps(inv[r])));
}

template <int D>
void head_f32(const float* q, int64_t stride, int64_t kv_off, int L, float scale, float* out, int64_t ostride,
              Scratch& w) {
  const int nb = (L + 15) / 16, ld = nb * 16;
  float* kp = w.kp.data();
  float* s = w.s.data();
  pack_k_f32<D>(q + kv_off, stride, L, kp);
  const float* v = q + 2 * kv_off;
  float inv[RB];
  for (int r0 = 0; r0 < L; r0 += RB) {
    const int R = std::min(RB, L - r0);
    const float* qb = q + r0 * stride;
    if (R == RB) qk_f32<RB, D>(qb, stride, kp, nb, s, ld);
    else for (int r = 0; r < R; ++r) qk_f32<1, D>(qb + r * stride, stride, kp, nb, s + r * ld, ld);
    for (int r = 0; r < R; ++r) inv[r] = 1.0f / softmax_row<false>(s + r * ld, L, scale, nullptr);
    float* o = out + r0 * ostride;
    int r = 0;
    for (; r + 4 <= R; r += 4) pv_f32<4, D>(s + r * ld, ld, v, stride, L, inv + r, o + r * ostride, ostride);
    for (; r < R; ++r) pv_f32<1, D>(s + r * ld, ld, v, stride, L, inv + r, o + r * ostride, ostride);
  }
}

#else  // AVX2 + FMA: the float32 kernel only (no bf16 dot products on these CPUs), 8 lanes

inline __m256 exp_ps(__m256 x) {  // as the AVX-512 one: e^x for x <= 0, 2^n added to the exponent bits
  const __m256 magic = _mm256_set1_ps(12582912.0f), log2e = _mm256_set1_ps(1.44269504088896341f);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  __m256 t = _mm256_fmadd_ps(x, log2e, magic);
  __m256 n = _mm256_sub_ps(t, magic);
  __m256 f = _mm256_fmsub_ps(x, log2e, n);
  __m256 p = _mm256_set1_ps(1.5403530393381606e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_castps_si256(t), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
}

// one row of L scores in place: e = exp(scale · (s − max)); s is padded to whole vectors (zeros written past
// L); returns Σ e
inline float softmax_row_f32(float* s, int L, float scale) {
  const int Lv = (L + 7) / 8 * 8;
  for (int j = L; j < Lv; ++j) s[j] = -INFINITY;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int j = 0; j < Lv; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  float m[8], mx = -INFINITY;
  _mm256_storeu_ps(m, vmax);
  for (float v : m) mx = std::max(mx, v);
  const __m256 vs = _mm256_set1_ps(scale), vm = _mm256_set1_ps(mx * scale);
  __m256 vsum = _mm256_setzero_ps();
  for (int j = 0; j < Lv; j += 8) {
    __m256 e = exp_ps(_mm256_fmsub_ps(_mm256_loadu_ps(s + j), vs, vm));
    _mm256_storeu_ps(s + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = 0.0f;
  _mm256_storeu_ps(m, vsum);
  for (int j = 0; j < 8; ++j) sum += m[j];
  for (int j = L; j < Lv; ++j) sum -= s[j];  // exp of −inf: a 0 in exact arithmetic, ~1e-38 here
  for (int j = L; j < Lv; ++j) s[j] = 0.0f;
  return sum;
}

// K as [key block of 8][d][lane = key]
template <int D>
void pack_k_f32(const float* k, int64_t stride, int L, float* kp) {
  const int nb = (L + 7) / 8;
  std::memset(kp, 0, sizeof(float) * nb * D * 8);
  for (int j = 0; j < L; ++j) {
    const float* src = k + j * stride;
    float* dst = kp + (j / 8) * D * 8 + (j % 8);
    for (int d = 0; d < D; ++d) dst[d * 8] = src[d];
  }
}

template <int R, int D>
inline void qk_f32(const float* q, int64_t stride, const float* kp, int nb, float* s, int ld) {
  const float* qr[R];
  for (int r = 0; r < R; ++r) qr[r] = q + r * stride;
  int jb = 0;
  for (; jb + 2 <= nb; jb += 2) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float* k0 = kp + jb * D * 8;
    for (int d = 0; d < D; ++d) {
      __m256 b0 = _mm256_loadu_ps(k0 + d * 8), b1 = _mm256_loadu_ps(k0 + D * 8 + d * 8);
      for (int r = 0; r < R; ++r) {
        __m256 a = _mm256_broadcast_ss(qr[r] + d);
        acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(s + r * ld + jb * 8, acc[r][0]);
      _mm256_storeu_ps(s + r * ld + jb * 8 + 8, acc[r][1]);
    }
  }
  for (; jb < nb; ++jb) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    const float* k0 = kp + jb * D * 8;
    for (int d = 0; d < D; ++d) {
      __m256 b0 = _mm256_loadu_ps(k0 + d * 8);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(qr[r] + d), b0, acc[r]);
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_ps(s + r * ld + jb * 8, acc[r]);
  }
}

// out_r[c0:c0+32] = (e_r · V[:, c0:c0+32]) · inv_r for R rows, V read in place; 4 vectors a row
template <int R>
inline void pv_f32(const float* e, int lde, const float* v, int64_t stride, int L, const float* inv, float* out,
                   int64_t ostride, int c0) {
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r) for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_setzero_ps();
  for (int j = 0; j < L; ++j) {
    __m256 b[4];
    for (int c = 0; c < 4; ++c) b[c] = _mm256_loadu_ps(v + j * stride + c0 + 8 * c);
    for (int r = 0; r < R; ++r) {
      __m256 a = _mm256_broadcast_ss(e + r * lde + j);
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c)
      _mm256_storeu_ps(out + r * ostride + c0 + 8 * c, _mm256_mul_ps(acc[r][c], _mm256_set1_ps(inv[r])));
}

template <int D>
void head_f32(const float* q, int64_t stride, int64_t kv_off, int L, float scale, float* out, int64_t ostride,
              Scratch& w) {
  const int nb = (L + 7) / 8, ld = nb * 8;
  float* kp = w.kp.data();
  float* s = w.s.data();
  pack_k_f32<D>(q + kv_off, stride, L, kp);
  const float* v = q + 2 * kv_off;
  float inv[RB];
  for (int r0 = 0; r0 < L; r0 += RB) {
    const int R = std::min(RB, L - r0);
    const float* qb = q + r0 * stride;
    int r = 0;
    for (; r + 6 <= R; r += 6) qk_f32<6, D>(qb + r * stride, stride, kp, nb, s + r * ld, ld);
    for (; r < R; ++r) qk_f32<1, D>(qb + r * stride, stride, kp, nb, s + r * ld, ld);
    for (r = 0; r < R; ++r) inv[r] = 1.0f / softmax_row_f32(s + r * ld, L, scale);
    float* o = out + r0 * ostride;
    for (int c0 = 0; c0 < D; c0 += 32) {
      for (r = 0; r + 2 <= R; r += 2) pv_f32<2>(s + r * ld, ld, v, stride, L, inv + r, o + r * ostride, ostride, c0);
      for (; r < R; ++r) pv_f32<1>(s + r * ld, ld, v, stride, L, inv + r, o + r * ostride, ostride, c0);
    }
  }
}

template <int D>
void head_bf16(const uint16_t*, int64_t, int64_t, int, float, uint16_t*, int64_t, Scratch&) {
  TORCH_CHECK(false, "the bfloat16 kernel needs AVX512_BF16: this build is the AVX2 one");
}
#endif

template <typename T, int D>
void run(const torch::Tensor& qkv, const int64_t* cu, int64_t B, double scale, torch::Tensor& out) {
  const int64_t H = qkv.size(2), stride = 3 * H * D, kv_off = H * D, ostride = H * D;
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) max_len = std::max(max_len, cu[b + 1] - cu[b]);
  const T* base = qkv.data_ptr<T>();
  T* obase = out.data_ptr<T>();
  const float sc = static_cast<float>(scale);
  // one task = one (sequence, head): its packed K / V are shared by all of its query rows
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    Scratch w((int)max_len, D);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / H, h = i % H, L = cu[b + 1] - cu[b];
      if (L <= 0) continue;
      const T* q = base + cu[b] * stride + h * D;
      T* o = obase + cu[b] * ostride + h * D;
      if constexpr (std::is_same_v<T, float>) head_f32<D>(q, stride, kv_off, (int)L, sc, o, ostride, w);
      else head_bf16<D>(reinterpret_cast<const uint16_t*>(q), stride, kv_off, (int)L, sc,
                        reinterpret_cast<uint16_t*>(o), ostride, w);
    }
  });
}

}  // namespace

// qkv (N, 3, h, D) contiguous, cu_seqlens (B + 1,) int64 ascending from 0 to N, out (N, h, D) contiguous
void varlen_attention(torch::Tensor qkv, torch::Tensor cu_seqlens, double scale, torch::Tensor out) {
  TORCH_CHECK(qkv.dim() == 4 && qkv.size(1) == 3 && qkv.is_contiguous() && !qkv.requires_grad(),
              "qkv must be a contiguous (N, 3, heads, head_dim) tensor without grad");
  TORCH_CHECK(qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kBFloat16, "float32 or bfloat16 only");
  const int64_t D = qkv.size(3);
  TORCH_CHECK(D == 32 || D == 64, "head_dim must be 32 or 64");
  TORCH_CHECK(out.scalar_type() == qkv.scalar_type() && out.is_contiguous() && out.dim() == 3 &&
              out.size(0) == qkv.size(0) && out.size(1) == qkv.size(2) && out.size(2) == D, "out must be (N, h, d)");
  TORCH_CHECK(cu_seqlens.scalar_type() == at::kLong && cu_seqlens.dim() == 1 && cu_seqlens.is_contiguous(),
              "cu_seqlens must be a contiguous int64 vector");
  const int64_t B = cu_seqlens.numel() - 1;
  const int64_t* cu = cu_seqlens.data_ptr<int64_t>();
  TORCH_CHECK(B >= 0 && cu[0] == 0 && cu[B] == qkv.size(0), "cu_seqlens must run from 0 to N");
  for (int64_t b = 0; b < B; ++b) TORCH_CHECK(cu[b + 1] >= cu[b], "cu_seqlens must not decrease");
  const bool bf = qkv.scalar_type() == at::kBFloat16;
#if !defined(__AVX512F__)
  TORCH_CHECK(!bf, "the bfloat16 kernel needs AVX512_BF16: this build is the AVX2 one (float32 only)");
#endif
  if (bf && D == 64) run<at::BFloat16, 64>(qkv, cu, B, scale, out);
  else if (bf) run<at::BFloat16, 32>(qkv, cu, B, scale, out);
  else if (D == 64) run<float, 64>(qkv, cu, B, scale, out);
  else run<float, 32>(qkv, cu, B, scale, out);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("varlen_attention", &varlen_attention, "softmax(q k^T * scale) v per packed sequence, into out");
}
