// Minimal Hugging Face LLaMA writer for tests: config.json plus safetensors file(s), with values
// rounded (round-to-nearest-even) to F32, F16 or BF16 and written back into the Weights.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "llama_reference.h"

namespace reference {
namespace {

// Bit layout of a binary floating-point storage type.
struct FloatFormat {
  int mantissa_bits;  // explicit fraction bits
  int min_exp;        // exponent of the smallest normal value
  int max_exp;        // exponent of the largest finite value
  size_t bytes;
};

FloatFormat format_of(const std::string& dtype) {
  if (dtype == "F32") return {23, -126, 127, 4};
  if (dtype == "F16") return {10, -14, 15, 2};
  if (dtype == "BF16") return {7, -126, 127, 2};
  throw std::invalid_argument("reference: unsupported dtype " + dtype);
}

// Appends the low `bytes` bytes of bits in little-endian order.
void append_le(std::vector<unsigned char>* out, uint64_t bits, size_t bytes) {
  for (size_t i = 0; i < bytes; i++) out->push_back(static_cast<unsigned char>(bits >> (8 * i)));
}

// Encodes x, already exactly representable in dtype, as its little-endian bytes.
void encode_value(std::vector<unsigned char>* out, double x, const std::string& dtype) {
  if (dtype == "F32" || dtype == "BF16") {
    // exact conversion to float32; bf16 is the upper half of its bits
    float f = static_cast<float>(x);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (dtype == "F32")
      append_le(out, bits, 4);
    else
      append_le(out, bits >> 16, 2);
    return;
  }
  // F16: sign | 5-bit exponent (bias 15) | 10-bit fraction
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  uint16_t bits;
  if (std::isnan(a)) {
    bits = 0x7E00;
  } else if (std::isinf(a)) {
    bits = 0x7C00;
  } else if (a < std::ldexp(1.0, -14)) {
    bits = static_cast<uint16_t>(a / std::ldexp(1.0, -24));  // subnormal: multiples of 2^-24
  } else {
    int e = std::ilogb(a);
    auto fraction = static_cast<uint16_t>((a / std::ldexp(1.0, e) - 1.0) * 1024.0);
    bits = static_cast<uint16_t>(((e + 15) << 10) | fraction);
  }
  append_le(out, sign | bits, 2);
}

// One named tensor to write, pointing at the (already rounded) values.
struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;
  const std::vector<double>* values;
};

// Writes one safetensors file holding the given tensors; returns its data byte count.
size_t write_safetensors(const std::filesystem::path& path, const std::vector<TensorEntry>& tensors,
                         const std::string& dtype) {
  const size_t elem = format_of(dtype).bytes;
  // header: name -> dtype, shape, data_offsets relative to the data section
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<unsigned char> data;
  for (const TensorEntry& t : tensors) {
    size_t begin = data.size();
    for (double v : *t.values) encode_value(&data, v, dtype);
    if (data.size() - begin != t.values->size() * elem)
      throw std::logic_error("reference: encoded size mismatch");
    header[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  // pad header JSON with spaces to a multiple of 8
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::vector<unsigned char> prefix;
  append_le(&prefix, text.size(), 8);

  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("reference: cannot write " + path.string());
  out.write(reinterpret_cast<const char*>(prefix.data()), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("reference: write failed for " + path.string());
  return data.size();
}

nlohmann::json config_json(const Config& c, const std::string& dtype) {
  nlohmann::json j;
  switch (c.family) {  // the fields each family's released config.json carries
    case Family::kLlama:
      j["architectures"] = {"LlamaForCausalLM"};
      j["model_type"] = "llama";
      j["attention_bias"] = false;
      j["mlp_bias"] = false;
      break;
    case Family::kMistral:
      j["architectures"] = {"MistralForCausalLM"};
      j["model_type"] = "mistral";
      j["sliding_window"] =
          c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json();
      break;
    case Family::kQwen2:
      j["architectures"] = {"Qwen2ForCausalLM"};
      j["model_type"] = "qwen2";
      j["use_sliding_window"] = false;
      j["sliding_window"] = c.max_seq_len;
      j["max_window_layers"] = c.n_layers;
      break;
    case Family::kQwen3:
      j["architectures"] = {"Qwen3ForCausalLM"};
      j["model_type"] = "qwen3";
      j["attention_bias"] = false;
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      break;
  }
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = effective_head_dim(c);
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids[0];
  else
    j["eos_token_id"] = c.eos_token_ids;
  j["torch_dtype"] = dtype == "F32" ? "float32" : dtype == "F16" ? "float16" : "bfloat16";
  if (c.rope_scaling.enabled) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j;
}

// Five-digit, zero-padded shard number.
std::string five_digits(int n) {
  std::string s = std::to_string(n);
  return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
}

}  // namespace

double round_to_dtype(double x, const std::string& dtype) {
  FloatFormat f = format_of(dtype);
  if (x == 0.0 || !std::isfinite(x)) return x;
  // quantum = spacing of representable values around x (fixed below the normal range)
  int e = std::max(std::ilogb(x), f.min_exp);
  double quantum = std::ldexp(1.0, e - f.mantissa_bits);
  double r = std::nearbyint(x / quantum) * quantum;  // ties to even in the default mode
  // overflow past the largest finite value goes to infinity
  double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -f.mantissa_bits), f.max_exp);
  if (std::fabs(r) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r;
}

void write_hf_model(const std::string& dir, const Config& config, Weights* weights,
                    const std::string& dtype, int n_shards) {
  format_of(dtype);  // validate dtype early
  const int64_t dim = config.dim, hidden = config.hidden_dim, vocab = config.vocab_size;
  const int64_t hd = effective_head_dim(config);
  const int64_t q_dim = config.n_heads * hd, kv_dim = config.n_kv_heads * hd;

  // round every value in place so the oracle computes on exactly what is written
  auto round_all = [&](std::vector<double>* v) {
    for (double& x : *v) x = round_to_dtype(x, dtype);
  };
  round_all(&weights->embed);
  for (auto& l : weights->layers) {
    for (auto* v : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                    &l.wo, &l.ffn_norm, &l.w1, &l.w2, &l.w3})
      round_all(v);
  }
  round_all(&weights->final_norm);
  if (config.tie_word_embeddings)
    weights->lm_head = weights->embed;
  else
    round_all(&weights->lm_head);

  // tensors in model order with HF names and shapes
  std::vector<TensorEntry> tensors;
  tensors.push_back({"model.embed_tokens.weight", {vocab, dim}, &weights->embed});
  for (size_t i = 0; i < weights->layers.size(); i++) {
    const LayerWeights& l = weights->layers[i];
    std::string p = "model.layers." + std::to_string(i) + ".";
    tensors.push_back({p + "input_layernorm.weight", {dim}, &l.attn_norm});
    tensors.push_back({p + "self_attn.q_proj.weight", {q_dim, dim}, &l.wq});
    tensors.push_back({p + "self_attn.k_proj.weight", {kv_dim, dim}, &l.wk});
    tensors.push_back({p + "self_attn.v_proj.weight", {kv_dim, dim}, &l.wv});
    if (config.family == Family::kQwen2) {
      tensors.push_back({p + "self_attn.q_proj.bias", {q_dim}, &l.bq});
      tensors.push_back({p + "self_attn.k_proj.bias", {kv_dim}, &l.bk});
      tensors.push_back({p + "self_attn.v_proj.bias", {kv_dim}, &l.bv});
    }
    if (config.family == Family::kQwen3) {
      tensors.push_back({p + "self_attn.q_norm.weight", {hd}, &l.q_norm});
      tensors.push_back({p + "self_attn.k_norm.weight", {hd}, &l.k_norm});
    }
    tensors.push_back({p + "self_attn.o_proj.weight", {dim, q_dim}, &l.wo});
    tensors.push_back({p + "post_attention_layernorm.weight", {dim}, &l.ffn_norm});
    tensors.push_back({p + "mlp.gate_proj.weight", {hidden, dim}, &l.w1});
    tensors.push_back({p + "mlp.up_proj.weight", {hidden, dim}, &l.w3});
    tensors.push_back({p + "mlp.down_proj.weight", {dim, hidden}, &l.w2});
  }
  tensors.push_back({"model.norm.weight", {dim}, &weights->final_norm});
  if (!config.tie_word_embeddings)
    tensors.push_back({"lm_head.weight", {vocab, dim}, &weights->lm_head});

  // check each tensor's element count against its shape
  for (const TensorEntry& t : tensors) {
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    if (static_cast<size_t>(n) != t.values->size())
      throw std::invalid_argument("reference: wrong size for " + t.name);
  }

  std::filesystem::path root(dir);
  std::filesystem::create_directories(root);
  {
    std::ofstream out(root / "config.json");
    out << config_json(config, dtype).dump(2) << "\n";
    if (!out) throw std::runtime_error("reference: cannot write config.json in " + dir);
  }

  if (n_shards <= 1) {
    write_safetensors(root / "model.safetensors", tensors, dtype);
    return;
  }
  if (static_cast<size_t>(n_shards) > tensors.size())
    throw std::invalid_argument("reference: more shards than tensors");

  // split tensors across shards in order: tensor i goes to shard i * n_shards / count
  nlohmann::json weight_map = nlohmann::json::object();
  size_t total_size = 0;
  for (int s = 0; s < n_shards; s++) {
    std::vector<TensorEntry> part;
    for (size_t i = 0; i < tensors.size(); i++) {
      if (static_cast<int>(i * n_shards / tensors.size()) == s) part.push_back(tensors[i]);
    }
    std::string file =
        "model-" + five_digits(s + 1) + "-of-" + five_digits(n_shards) + ".safetensors";
    total_size += write_safetensors(root / file, part, dtype);
    for (const TensorEntry& t : part) weight_map[t.name] = file;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  std::ofstream out(root / "model.safetensors.index.json");
  out << index.dump(2) << "\n";
  if (!out) throw std::runtime_error("reference: cannot write index in " + dir);
}

}  // namespace reference
