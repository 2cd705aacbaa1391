// Reference weight sources: a reader for llama2.c "version 0" checkpoints and a seeded
// random-weight generator (splitmix64), both producing double-precision Weights.
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "llama_reference.h"

namespace reference {
namespace {

// Sequential little-endian reader over a whole file held in memory.
class ByteReader {
 public:
  explicit ByteReader(std::vector<char> bytes) : bytes_(std::move(bytes)) {}

  int32_t read_int32() {
    unsigned char b[4];
    take(b, 4);
    uint32_t u = static_cast<uint32_t>(b[0]) | (static_cast<uint32_t>(b[1]) << 8) |
                 (static_cast<uint32_t>(b[2]) << 16) | (static_cast<uint32_t>(b[3]) << 24);
    int32_t v;
    std::memcpy(&v, &u, 4);
    return v;
  }

  float read_float32() {
    int32_t bits = read_int32();
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

  // Reads count float32 values widened to double.
  std::vector<double> read_floats(size_t count) {
    std::vector<double> out(count);
    for (size_t i = 0; i < count; i++) out[i] = read_float32();
    return out;
  }

  void skip(size_t n) {
    if (pos_ + n > bytes_.size()) throw std::runtime_error("llama2c: file truncated");
    pos_ += n;
  }

 private:
  void take(unsigned char* dst, size_t n) {
    if (pos_ + n > bytes_.size()) throw std::runtime_error("llama2c: file truncated");
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
  }

  std::vector<char> bytes_;
  size_t pos_ = 0;
};

// splitmix64 generator with a uniform double in [-scale, scale].
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  double uniform(double scale) {
    // 53 random bits -> [0, 1) -> [-scale, scale)
    double u = static_cast<double>(next() >> 11) * 0x1.0p-53;
    return (2.0 * u - 1.0) * scale;
  }

  std::vector<double> fill(size_t count, double center, double scale) {
    std::vector<double> out(count);
    for (double& v : out) v = center + uniform(scale);
    return out;
  }

 private:
  uint64_t state_;
};

}  // namespace

Weights load_llama2c(const std::string& path, Config* config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("llama2c: cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ByteReader reader(std::move(bytes));

  // header: 7 int32
  Config c{};
  c.dim = reader.read_int32();
  c.hidden_dim = reader.read_int32();
  c.n_layers = reader.read_int32();
  c.n_heads = reader.read_int32();
  c.n_kv_heads = reader.read_int32();
  int32_t vocab = reader.read_int32();
  c.max_seq_len = reader.read_int32();
  c.tie_word_embeddings = vocab > 0;
  c.vocab_size = vocab > 0 ? vocab : -vocab;
  if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
      c.vocab_size <= 0 || c.max_seq_len <= 0 || c.dim % c.n_heads != 0 ||
      c.n_heads % c.n_kv_heads != 0)
    throw std::runtime_error("llama2c: bad header in " + path);
  c.head_dim = c.dim / c.n_heads;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000;
  c.bos_token_id = 1;
  c.eos_token_ids = {1, 2};

  const size_t dim = c.dim, hidden = c.hidden_dim, layers = c.n_layers;
  const size_t kv_dim = static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  Weights w;
  w.layers.resize(layers);

  // arrays are stored grouped by kind across all layers
  w.embed = reader.read_floats(c.vocab_size * dim);
  for (auto& l : w.layers) l.attn_norm = reader.read_floats(dim);
  for (auto& l : w.layers) l.wq = reader.read_floats(dim * dim);
  for (auto& l : w.layers) l.wk = reader.read_floats(kv_dim * dim);
  for (auto& l : w.layers) l.wv = reader.read_floats(kv_dim * dim);
  for (auto& l : w.layers) l.wo = reader.read_floats(dim * dim);
  for (auto& l : w.layers) l.ffn_norm = reader.read_floats(dim);
  for (auto& l : w.layers) l.w1 = reader.read_floats(hidden * dim);
  for (auto& l : w.layers) l.w2 = reader.read_floats(dim * hidden);
  for (auto& l : w.layers) l.w3 = reader.read_floats(hidden * dim);
  w.final_norm = reader.read_floats(dim);
  // skip freq_cis_real and freq_cis_imag
  reader.skip(2 * static_cast<size_t>(c.max_seq_len) * (c.head_dim / 2) * sizeof(float));
  w.lm_head = c.tie_word_embeddings ? w.embed : reader.read_floats(c.vocab_size * dim);

  *config = c;
  return w;
}

Weights random_weights(const Config& config, uint64_t seed) {
  SplitMix64 rng(seed);
  const size_t dim = config.dim, hidden = config.hidden_dim, vocab = config.vocab_size;
  const size_t hd = effective_head_dim(config);
  const size_t q_dim = config.n_heads * hd, kv_dim = config.n_kv_heads * hd;
  // matrix scale 1/sqrt(fan_in)
  auto mat_scale = [](size_t fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); };

  Weights w;
  w.embed = rng.fill(vocab * dim, 0.0, 1.0);
  w.layers.resize(config.n_layers);
  for (auto& l : w.layers) {
    l.attn_norm = rng.fill(dim, 1.0, 0.1);
    l.wq = rng.fill(q_dim * dim, 0.0, mat_scale(dim));
    l.wk = rng.fill(kv_dim * dim, 0.0, mat_scale(dim));
    l.wv = rng.fill(kv_dim * dim, 0.0, mat_scale(dim));
    l.wo = rng.fill(dim * q_dim, 0.0, mat_scale(q_dim));
    l.ffn_norm = rng.fill(dim, 1.0, 0.1);
    l.w1 = rng.fill(hidden * dim, 0.0, mat_scale(dim));
    l.w2 = rng.fill(dim * hidden, 0.0, mat_scale(hidden));
    l.w3 = rng.fill(hidden * dim, 0.0, mat_scale(dim));
  }
  for (auto& l : w.layers) {  // after the LLaMA draws, so a LLaMA's weights stay as they were
    if (config.family == Family::kQwen2) {
      l.bq = rng.fill(q_dim, 0.0, 0.5);
      l.bk = rng.fill(kv_dim, 0.0, 0.5);
      l.bv = rng.fill(kv_dim, 0.0, 0.5);
    }
    if (config.family == Family::kQwen3) {
      l.q_norm = rng.fill(hd, 1.0, 0.5);
      l.k_norm = rng.fill(hd, 1.0, 0.5);
    }
  }
  w.final_norm = rng.fill(dim, 1.0, 0.1);
  w.lm_head = config.tie_word_embeddings ? w.embed : rng.fill(vocab * dim, 0.0, mat_scale(dim));
  return w;
}

}  // namespace reference
