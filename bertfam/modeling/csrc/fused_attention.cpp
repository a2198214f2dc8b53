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

// The float32 kernel is written once over Vec, the build's vector: 16 lanes with AVX-512, 8 with AVX2 + FMA.
#if defined(__AVX512F__)
struct Vec {
  using T = __m512;
  static constexpr int W = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T fmsub(T a, T b, T c) { return _mm512_fmsub_ps(a, b, c); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T times_pow2(T p, T t) {  // p · 2^n, n the integer in t's low mantissa bits (exp_ps)
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), _mm512_slli_epi32(_mm512_castps_si512(t), 23)));
  }
  static T first(T v, int n) { return _mm512_maskz_mov_ps((__mmask16)((1u << n) - 1u), v); }  // lanes >= n zeroed
  static float hmax(T v) { return _mm512_reduce_max_ps(v); }
  static float hsum(T v) { return _mm512_reduce_add_ps(v); }
};
#else
struct Vec {
  using T = __m256;
  static constexpr int W = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T fmsub(T a, T b, T c) { return _mm256_fmsub_ps(a, b, c); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T times_pow2(T p, T t) {
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_castps_si256(t), 23)));
  }
  static T first(T v, int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane)));
  }
  static float hmax(T v) {
    float m[8];
    _mm256_storeu_ps(m, v);
    return *std::max_element(m, m + 8);
  }
  static float hsum(T v) {
    float m[8];
    _mm256_storeu_ps(m, v);
    return m[0] + m[1] + m[2] + m[3] + m[4] + m[5] + m[6] + m[7];
  }
};
#endif
using V = Vec::T;
constexpr int W = Vec::W;

// e^x for x <= 0 (scores minus their row's max): 2^n · 2^f, f in [-0.5, 0.5] by a degree-6 polynomial
// (relative error ~2e-7); n = round(t) by the 1.5 · 2^23 trick (its low bits then hold n as an integer) and 2^n
// by adding n to the exponent bits: cheaper than roundscale / scalef, exact for the clamped range
inline V exp_ps(V x) {
  const V magic = Vec::set1(12582912.0f), log2e = Vec::set1(1.44269504088896341f);
  x = Vec::max(x, Vec::set1(-87.0f));
  V t = Vec::fmadd(x, log2e, magic);
  V f = Vec::fmsub(x, log2e, Vec::sub(t, magic));
  V p = Vec::set1(1.5403530393381606e-4f);
  p = Vec::fmadd(p, f, Vec::set1(1.3333558146428443e-3f));
  p = Vec::fmadd(p, f, Vec::set1(9.6181291076284772e-3f));
  p = Vec::fmadd(p, f, Vec::set1(5.5504108664821580e-2f));
  p = Vec::fmadd(p, f, Vec::set1(2.4022650695910071e-1f));
  p = Vec::fmadd(p, f, Vec::set1(6.9314718055994531e-1f));
  p = Vec::fmadd(p, f, Vec::set1(1.0f));
  return Vec::times_pow2(p, t);
}

// One row of L scores in place (s padded to whole vectors): e = exp(scale · (s − max)), zero past L, handed to
// put(j, e) a vector at a time (written over s for float32, as bf16 elsewhere for the bf16 kernel); returns Σ e.
template <typename Put>
inline float softmax_row(float* s, int L, float scale, Put put) {
  const int full = L / W * W;
  V vmax = Vec::set1(-INFINITY);
  for (int j = 0; j < full; j += W) vmax = Vec::max(vmax, Vec::load(s + j));
  float mx = Vec::hmax(vmax);
  for (int j = full; j < L; ++j) mx = std::max(mx, s[j]);
  const V vs = Vec::set1(scale), vm = Vec::set1(mx * scale);
  V vsum = Vec::zero();
  for (int j = 0; j < L; j += W) {
    V e = exp_ps(Vec::fmsub(Vec::load(s + j), vs, vm));
    if (j + W > L) e = Vec::first(e, L - j);
    vsum = Vec::add(vsum, e);
    put(j, e);
  }
  return Vec::hsum(vsum);
}

// ------------------------------------------------------------------------------------------- float32
// K as [key block of W][d][lane = key], zero keys past L
template <int D>
void pack_k_f32(const float* k, int64_t stride, int L, float* kp) {
  const int nb = (L + W - 1) / W;
  std::memset(kp, 0, sizeof(float) * nb * D * W);
  for (int j = 0; j < L; ++j) {
    const float* src = k + j * stride;
    float* dst = kp + (j / W) * D * W + (j % W);
    for (int d = 0; d < D; ++d) dst[d * W] = src[d];
  }
}

// s[r][j] = q_r · k_j for R rows (stride apart), two key blocks at a time
template <int R, int D>
inline void qk_f32(const float* q, int64_t stride, const float* kp, int nb, float* s, int ld) {
  const float* qr[R];
  for (int r = 0; r < R; ++r) qr[r] = q + r * stride;
  int jb = 0;
  for (; jb + 2 <= nb; jb += 2) {
    V acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = Vec::zero();
    const float* k0 = kp + jb * D * W;
    for (int d = 0; d < D; ++d) {
      V b0 = Vec::load(k0 + d * W), b1 = Vec::load(k0 + D * W + d * W);
      for (int r = 0; r < R; ++r) {
        V a = Vec::set1(qr[r][d]);
        acc[r][0] = Vec::fmadd(a, b0, acc[r][0]);
        acc[r][1] = Vec::fmadd(a, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      Vec::store(s + r * ld + jb * W, acc[r][0]);
      Vec::store(s + r * ld + jb * W + W, acc[r][1]);
    }
  }
  for (; jb < nb; ++jb) {
    V acc[R];
    for (int r = 0; r < R; ++r) acc[r] = Vec::zero();
    const float* k0 = kp + jb * D * W;
    for (int d = 0; d < D; ++d) {
      V b0 = Vec::load(k0 + d * W);
      for (int r = 0; r < R; ++r) acc[r] = Vec::fmadd(Vec::set1(qr[r][d]), b0, acc[r]);
    }
    for (int r = 0; r < R; ++r) Vec::store(s + r * ld + jb * W, acc[r]);
  }
}

// out_r[c0 : c0 + C·W] = (e_r · V[:, c0 : c0 + C·W]) · inv_r for R rows, V read in place
template <int R, int C>
inline void pv_f32(const float* e, int lde, const float* v, int64_t stride, int L, const float* inv, float* out,
                   int64_t ostride, int c0) {
  V acc[R][C];
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) acc[r][c] = Vec::zero();
  for (int j = 0; j < L; ++j) {
    V b[C];
    for (int c = 0; c < C; ++c) b[c] = Vec::load(v + j * stride + c0 + W * c);
    for (int r = 0; r < R; ++r) {
      V a = Vec::set1(e[r * lde + j]);
      for (int c = 0; c < C; ++c) acc[r][c] = Vec::fmadd(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) Vec::store(out + r * ostride + c0 + W * c, Vec::mul(acc[r][c], Vec::set1(inv[r])));
}

template <int D>
void head_f32(const float* q, int64_t stride, int64_t kv_off, int L, float scale, float* out, int64_t ostride,
              Scratch& w) {
  // register tiles: QKᵀ 8 rows (16 lanes) or 6 (8 lanes) x 2 key vectors; PV up to 4 vectors of a row's
  // output x 4 rows (16 lanes) or 2 (8 lanes): at most 16 (of 32) or 12 (of 16) accumulators
  constexpr int QR = W == 16 ? 8 : 6, C = D / W < 4 ? D / W : 4, PR = W == 16 ? 4 : 2;
  const int nb = (L + W - 1) / W, ld = nb * W;
  float* kp = w.kp.data();
  float* s = w.s.data();
  pack_k_f32<D>(q + kv_off, stride, L, kp);
  const float* v = q + 2 * kv_off;
  float inv[RB];
  for (int r0 = 0; r0 < L; r0 += RB) {
    const int R = std::min(RB, L - r0);
    const float* qb = q + r0 * stride;
    int r = 0;
    for (; r + QR <= R; r += QR) qk_f32<QR, D>(qb + r * stride, stride, kp, nb, s + r * ld, ld);
    for (; r < R; ++r) qk_f32<1, D>(qb + r * stride, stride, kp, nb, s + r * ld, ld);
    for (r = 0; r < R; ++r) {
      float* row = s + r * ld;
      inv[r] = 1.0f / softmax_row(row, L, scale, [row](int j, V e) { Vec::store(row + j, e); });
    }
    float* o = out + r0 * ostride;
    for (int c0 = 0; c0 < D; c0 += C * W) {
      for (r = 0; r + PR <= R; r += PR)
        pv_f32<PR, C>(s + r * ld, ld, v, stride, L, inv + r, o + r * ostride, ostride, c0);
      for (; r < R; ++r) pv_f32<1, C>(s + r * ld, ld, v, stride, L, inv + r, o + r * ostride, ostride, c0);
    }
  }
}

#if defined(__AVX512F__)
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
      uint16_t* pr = p + r * ld;  // whole vectors of bf16: p has room past L
      inv[r] = 1.0f / softmax_row(s + r * ld, L, scale, [pr](int j, V e) {
        _mm256_storeu_si256((__m256i*)(pr + j), (__m256i)_mm512_cvtneps_pbh(e));
      });
      if (L & 1) p[r * ld + L] = 0;  // the odd last key's partner (a zero V row) gets weight 0
    }
    uint16_t* o = out + r0 * ostride;
    int r = 0;
    for (; r + 4 <= R; r += 4) pv_bf16<4, D>(p + r * ld, ld, vp, np, inv + r, o + r * ostride, ostride);
    for (; r < R; ++r) pv_bf16<1, D>(p + r * ld, ld, vp, np, inv + r, o + r * ostride, ostride);
  }
}

#else  // the AVX2 build: no bf16 dot products on these CPUs; varlen_attention refuses bf16 before this
template <int D>
void head_bf16(const uint16_t*, int64_t, int64_t, int, float, uint16_t*, int64_t, Scratch&) {}
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
