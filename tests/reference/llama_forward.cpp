// Reference LLaMA forward pass in double precision: RMSNorm, RoPE (rotate-half or interleaved,
// optional Llama-3 frequency scaling), grouped-query causal attention, SwiGLU FFN.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "llama_reference.h"

namespace reference {
namespace {

// y[r] = sum_c W[r][c] * x[c] for W row-major [rows][cols].
std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, int rows,
                           int cols) {
  std::vector<double> y(rows, 0.0);
  for (int r = 0; r < rows; r++) {
    double sum = 0.0;
    for (int c = 0; c < cols; c++) sum += w[static_cast<size_t>(r) * cols + c] * x[c];
    y[r] = sum;
  }
  return y;
}

// out = x / sqrt(mean(x^2) + eps) * gain
std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& gain,
                            double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); i++) out[i] = x[i] * inv * gain[i];
  return out;
}

// Rotates each head_dim-sized head of vec in place at position pos.
void apply_rope(std::vector<double>* vec, int n_heads, int head_dim,
                const std::vector<double>& inv_freq, int pos, RopeLayout layout) {
  int half = head_dim / 2;
  for (int h = 0; h < n_heads; h++) {
    double* head = vec->data() + static_cast<size_t>(h) * head_dim;
    for (int i = 0; i < half; i++) {
      double angle = pos * inv_freq[i];
      double c = std::cos(angle), s = std::sin(angle);
      // pick the pair this frequency rotates
      int ia = layout == RopeLayout::kRotateHalf ? i : 2 * i;
      int ib = layout == RopeLayout::kRotateHalf ? i + half : 2 * i + 1;
      double a = head[ia], b = head[ib];
      head[ia] = a * c - b * s;
      head[ib] = a * s + b * c;
    }
  }
}

}  // namespace

int effective_head_dim(const Config& config) {
  return config.head_dim > 0 ? config.head_dim : config.dim / config.n_heads;
}

std::vector<double> rope_inv_freq(const Config& config) {
  int hd = effective_head_dim(config);
  std::vector<double> inv_freq(hd / 2);
  const Llama3RopeScaling& sc = config.rope_scaling;
  for (int i = 0; i < hd / 2; i++) {
    // base frequency theta^(-2i/hd)
    double f = std::pow(config.rope_theta, -2.0 * i / hd);
    if (sc.enabled) {
      // Llama-3: keep high frequencies, divide low ones by factor, blend in between
      double orig = sc.original_max_position_embeddings;
      double wavelen = 2.0 * std::numbers::pi / f;
      double low_freq_wavelen = orig / sc.low_freq_factor;
      double high_freq_wavelen = orig / sc.high_freq_factor;
      if (wavelen < high_freq_wavelen) {
        // unchanged
      } else if (wavelen > low_freq_wavelen) {
        f = f / sc.factor;
      } else {
        double smooth =
            (orig / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor);
        f = (1.0 - smooth) * f / sc.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
  return inv_freq;
}

std::vector<std::vector<double>> forward_all(const Config& config, const Weights& weights,
                                             const std::vector<int>& tokens, RopeLayout layout) {
  const int dim = config.dim, hidden = config.hidden_dim, hd = effective_head_dim(config);
  const int n_heads = config.n_heads, n_kv = config.n_kv_heads, vocab = config.vocab_size;
  const int q_dim = n_heads * hd, kv_dim = n_kv * hd;
  const int group = n_heads / n_kv;  // query heads per kv head
  const int n_tok = static_cast<int>(tokens.size());
  const std::vector<double> inv_freq = rope_inv_freq(config);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  // per-layer caches of rotated keys and values, one entry per position
  std::vector<std::vector<std::vector<double>>> k_cache(config.n_layers), v_cache(config.n_layers);
  std::vector<std::vector<double>> logits;

  for (int p = 0; p < n_tok; p++) {
    int token = tokens[p];
    if (token < 0 || token >= vocab) throw std::out_of_range("reference: token out of range");
    // x = embed[token]
    std::vector<double> x(weights.embed.begin() + static_cast<size_t>(token) * dim,
                          weights.embed.begin() + static_cast<size_t>(token + 1) * dim);

    for (int l = 0; l < config.n_layers; l++) {
      const LayerWeights& lw = weights.layers[l];
      // attention rmsnorm
      std::vector<double> xn = rmsnorm(x, lw.attn_norm, config.rms_norm_eps);
      // q, k, v projections
      std::vector<double> q = matvec(lw.wq, xn, q_dim, dim);
      std::vector<double> k = matvec(lw.wk, xn, kv_dim, dim);
      std::vector<double> v = matvec(lw.wv, xn, kv_dim, dim);
      if (config.family == Family::kQwen2) {  // q, k and v biases, before RoPE
        for (int i = 0; i < q_dim; i++) q[i] += lw.bq[i];
        for (int i = 0; i < kv_dim; i++) k[i] += lw.bk[i];
        for (int i = 0; i < kv_dim; i++) v[i] += lw.bv[i];
      }
      if (config.family == Family::kQwen3) {  // each head's vector normalised on its own
        auto norm_heads = [&](std::vector<double>* vec, int heads, const std::vector<double>& g) {
          for (int h = 0; h < heads; h++) {
            std::vector<double> head(vec->begin() + h * hd, vec->begin() + (h + 1) * hd);
            head = rmsnorm(head, g, config.rms_norm_eps);
            std::copy(head.begin(), head.end(), vec->begin() + h * hd);
          }
        };
        norm_heads(&q, n_heads, lw.q_norm);
        norm_heads(&k, n_kv, lw.k_norm);
      }
      // RoPE on q and k
      apply_rope(&q, n_heads, hd, inv_freq, p, layout);
      apply_rope(&k, n_kv, hd, inv_freq, p, layout);
      k_cache[l].push_back(k);
      v_cache[l].push_back(v);

      // multi-head attention over positions first..p: all of them, or the last W under a window
      const int first = config.sliding_window > 0 ? std::max(0, p - config.sliding_window + 1) : 0;
      std::vector<double> att_out(q_dim, 0.0);
      for (int h = 0; h < n_heads; h++) {
        int kvh = h / group;
        const double* qh = q.data() + static_cast<size_t>(h) * hd;
        // scores = q . k / sqrt(hd)
        std::vector<double> scores(p + 1, -INFINITY);
        for (int t = first; t <= p; t++) {
          const double* kt = k_cache[l][t].data() + static_cast<size_t>(kvh) * hd;
          double dot = 0.0;
          for (int i = 0; i < hd; i++) dot += qh[i] * kt[i];
          scores[t] = dot * scale;
        }
        // softmax
        double max_score = scores[p];
        for (double s : scores) max_score = std::max(max_score, s);
        double sum = 0.0;
        for (double& s : scores) {
          s = std::exp(s - max_score);  // exp(-inf) = 0 outside the window
          sum += s;
        }
        for (double& s : scores) s /= sum;
        // weighted sum of values
        double* oh = att_out.data() + static_cast<size_t>(h) * hd;
        for (int t = 0; t <= p; t++) {
          const double* vt = v_cache[l][t].data() + static_cast<size_t>(kvh) * hd;
          for (int i = 0; i < hd; i++) oh[i] += scores[t] * vt[i];
        }
      }
      // output projection and residual
      std::vector<double> o = matvec(lw.wo, att_out, dim, q_dim);
      for (int i = 0; i < dim; i++) x[i] += o[i];

      // ffn rmsnorm
      xn = rmsnorm(x, lw.ffn_norm, config.rms_norm_eps);
      // SwiGLU: silu(W1 xn) * (W3 xn)
      std::vector<double> gate = matvec(lw.w1, xn, hidden, dim);
      std::vector<double> up = matvec(lw.w3, xn, hidden, dim);
      for (int i = 0; i < hidden; i++) {
        double g = gate[i];
        gate[i] = g / (1.0 + std::exp(-g)) * up[i];
      }
      // down projection and residual
      std::vector<double> down = matvec(lw.w2, gate, dim, hidden);
      for (int i = 0; i < dim; i++) x[i] += down[i];
    }

    // final rmsnorm and classifier
    std::vector<double> xf = rmsnorm(x, weights.final_norm, config.rms_norm_eps);
    logits.push_back(matvec(weights.lm_head, xf, vocab, dim));
  }
  return logits;
}

}  // namespace reference
