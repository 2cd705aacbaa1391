// llama2.c import and random-weight model generation, both writing HF-style directories.
#include "model/llama2c.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/random.h"
#include "model/checkpoint.h"
#include "model/safetensors_writer.h"
#include "ops/weight.h"

namespace tpllama {

namespace fs = std::filesystem;

namespace {

// Per head, rotate-half row j takes interleaved row 2j, row j + head_dim/2 takes row 2j+1.
std::vector<float> permute_for_rotate_half(const float* w, int n_heads, int head_dim, int in_dim) {
  std::vector<float> out(static_cast<size_t>(n_heads) * head_dim * in_dim);
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h)
    for (int j = 0; j < head_dim; ++j) {
      int src_row = j < half ? 2 * j : 2 * (j - half) + 1;
      const float* src = w + (static_cast<size_t>(h) * head_dim + src_row) * in_dim;
      std::copy(src, src + in_dim,
                out.begin() +
                    static_cast<std::ptrdiff_t>((static_cast<size_t>(h) * head_dim + j) * in_dim));
    }
  return out;
}

// Named tensors of a LLaMA model in HF order, each an f32 array kept alive by the caller.
struct NamedArrays {
  std::map<std::string, std::vector<float>> arrays;
  std::vector<TensorToWrite> order;
  void add(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    auto& stored = arrays[name];
    stored = std::move(data);
    order.push_back({name, std::move(shape), stored.data(), stored.size()});
  }
};

void write_model_dir(const LlamaConfig& config, const NamedArrays& tensors,
                     const ConvertOptions& options) {
  fs::create_directories(options.out_dir);
  if (!options.tokenizer_path.empty()) {
    if (!fs::exists(options.tokenizer_path))
      fail("tokenizer ", options.tokenizer_path, " does not exist");
    // A tokenizer.json travels with the files of its checkpoint beside it (BOS, chat template, stop
    // ids).
    const bool json = fs::path(options.tokenizer_path).extension() == ".json";
    std::vector<std::pair<fs::path, std::string>> copies = {
        {options.tokenizer_path, json ? "tokenizer.json" : "tokenizer.model"}};
    for (const std::string& name : tokenizer_companion_files()) {
      const fs::path beside = fs::path(options.tokenizer_path).parent_path() / name;
      if (json && fs::exists(beside)) copies.emplace_back(beside, name);
    }
    for (const auto& [from, name] : copies) {
      const std::string dest = options.out_dir + "/" + name;
      fs::copy_file(from, dest, fs::copy_options::overwrite_existing);
      fs::permissions(dest, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
    }
  }
  LlamaConfig written = config;
  if (options.dtype == DType::kI8)
    written.int8_group_size = static_cast<int>(ops::int8_group_size());
  nlohmann::json j = written.to_json();
  j["torch_dtype"] = torch_dtype_name(options.dtype);
  std::ofstream(options.out_dir + "/config.json") << j.dump(2) << '\n';
  write_safetensors(options.out_dir + "/model.safetensors", tensors.order, options.dtype);
}

// The 28-byte header of a llama2.c checkpoint as a config, with the values llama2.c assumes.
LlamaConfig read_llama2c_header(std::ifstream& in, const std::string& path) {
  int32_t h[7];
  if (!in.read(reinterpret_cast<char*>(h), sizeof h))
    fail(path, ": shorter than the 28-byte llama2.c header");
  LlamaConfig c;
  c.dim = h[0];
  c.hidden_dim = h[1];
  c.n_layers = h[2];
  c.n_heads = h[3];
  c.n_kv_heads = h[4];
  c.tie_word_embeddings = h[5] > 0;
  c.vocab_size = std::abs(h[5]);
  c.max_seq_len = h[6];
  c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.bos_token_id = 1;
  c.eos_token_ids = {2, 1};
  try {
    c.validate();
  } catch (const Error& e) {
    fail(path, ": header (dim ", h[0], ", hidden ", h[1], ", layers ", h[2], ", heads ", h[3],
         ", kv heads ", h[4], ", vocab ", h[5], ", seq_len ", h[6],
         ") is not a valid model: ", e.what());
  }
  if (c.dim % c.n_heads != 0)
    fail(path, ": dim (", c.dim, ") is not a multiple of n_heads (", c.n_heads, ")");
  return c;
}

// A llama2.c file holds exactly the float32 arrays its header implies.
void check_llama2c_size(const LlamaConfig& c, const std::string& path) {
  const int64_t d = c.dim, hd = c.head_dim, L = c.n_layers, kv = c.kv_dim(), hid = c.hidden_dim,
                V = c.vocab_size;
  // Checked arithmetic: a corrupt header must not wrap around to the file's real size.
  int64_t floats = 0;
  auto add = [&](std::initializer_list<int64_t> factors) {
    int64_t product = 1;
    for (int64_t f : factors)
      if (__builtin_mul_overflow(product, f, &product))
        fail(path, ": header dimensions are too large");
    if (__builtin_add_overflow(floats, product, &floats))
      fail(path, ": header dimensions are too large");
  };
  add({V, d});
  add({L, d, 2});            // rms_att, rms_ffn
  add({L, d, d, 2});         // wq, wo
  add({L, kv, d, 2});        // wk, wv
  add({L, hid, d, 3});       // w1, w2, w3
  add({d});                  // rms_final
  add({c.max_seq_len, hd});  // freq_cis_real and freq_cis_imag, head_dim/2 each
  if (!c.tie_word_embeddings) add({V, d});
  const auto file_size = static_cast<int64_t>(fs::file_size(path));
  if (floats > (INT64_MAX - 28) / 4 || file_size != 28 + floats * 4)
    fail(path, ": file has ", file_size, " bytes but its header implies ", 28 + floats * 4,
         " (is this a float32 'version 0' llama2.c export?)");
}

// The arrays that follow the header, as Hugging Face tensors: Wq and Wk permuted from Meta's
// interleaved RoPE layout to rotate-half, the freq_cis tables dropped.
NamedArrays read_llama2c_tensors(std::ifstream& in, const LlamaConfig& c, const std::string& path) {
  const int64_t d = c.dim, hd = c.head_dim, L = c.n_layers, kv = c.kv_dim(), hid = c.hidden_dim,
                V = c.vocab_size;
  auto read = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * 4));
    return v;
  };
  std::vector<float> emb = read(V * d), rms_att = read(L * d), wq = read(L * d * d),
                     wk = read(L * kv * d), wv = read(L * kv * d), wo = read(L * d * d),
                     rms_ffn = read(L * d), w1 = read(L * hid * d), w2 = read(L * d * hid),
                     w3 = read(L * hid * d), rms_final = read(d);
  read(c.max_seq_len * hd);  // freq_cis_real and freq_cis_imag: recomputed from rope_theta
  std::vector<float> wcls = c.tie_word_embeddings ? std::vector<float>{} : read(V * d);
  if (!in) fail(path, ": read failed");

  auto slice = [](const std::vector<float>& all, int64_t layer, int64_t n) {
    return std::vector<float>(all.begin() + layer * n, all.begin() + (layer + 1) * n);
  };
  NamedArrays t;
  t.add("model.embed_tokens.weight", {V, d}, emb);
  for (int64_t l = 0; l < L; ++l) {
    const int li = static_cast<int>(l);
    t.add(layer_tensor_name(li, "input_layernorm.weight"), {d}, slice(rms_att, l, d));
    t.add(layer_tensor_name(li, "self_attn.q_proj.weight"), {d, d},
          permute_for_rotate_half(wq.data() + l * d * d, c.n_heads, c.head_dim, c.dim));
    t.add(layer_tensor_name(li, "self_attn.k_proj.weight"), {kv, d},
          permute_for_rotate_half(wk.data() + l * kv * d, c.n_kv_heads, c.head_dim, c.dim));
    t.add(layer_tensor_name(li, "self_attn.v_proj.weight"), {kv, d}, slice(wv, l, kv * d));
    t.add(layer_tensor_name(li, "self_attn.o_proj.weight"), {d, d}, slice(wo, l, d * d));
    t.add(layer_tensor_name(li, "post_attention_layernorm.weight"), {d}, slice(rms_ffn, l, d));
    t.add(layer_tensor_name(li, "mlp.gate_proj.weight"), {hid, d}, slice(w1, l, hid * d));
    t.add(layer_tensor_name(li, "mlp.down_proj.weight"), {d, hid}, slice(w2, l, d * hid));
    t.add(layer_tensor_name(li, "mlp.up_proj.weight"), {hid, d}, slice(w3, l, hid * d));
  }
  t.add("model.norm.weight", {d}, rms_final);
  if (!c.tie_word_embeddings) t.add("lm_head.weight", {V, d}, wcls);
  return t;
}

}  // namespace

void check_convert_out(const std::string& out_dir) {
  if (!fs::exists(out_dir)) return;
  if (!fs::is_directory(out_dir)) fail("--out ", out_dir, " exists and is not a directory");
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    const bool weights = entry.path().extension() == ".safetensors" && name != "model.safetensors";
    if (weights || name == "model.safetensors.index.json" || name == kShardManifestName)
      fail("--out ", out_dir, " holds ", name,
           " of another model, which a run would read beside (or instead of) ",
           "the converted weights: convert into a new directory or one an earlier convert wrote");
  }
}

LlamaConfig convert_llama2c(const std::string& path, const ConvertOptions& options) {
  require_regular_file(path, "llama2.c checkpoint");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open llama2.c checkpoint ", path);
  const LlamaConfig c = read_llama2c_header(in, path);
  check_llama2c_size(c, path);
  write_model_dir(c, read_llama2c_tensors(in, c, path), options);
  return c;
}

void write_random_model(const LlamaConfig& c, uint64_t seed, const ConvertOptions& options) {
  c.validate();
  uint64_t state = seed;
  auto next_uniform = [&state]() {  // the splitmix64 sequence → [-1, 1)
    const uint64_t z = splitmix64_next(state);
    return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0);
  };
  auto matrix = [&](int64_t rows, int64_t cols) {
    std::vector<float> v(static_cast<size_t>(rows * cols));
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    for (float& x : v) x = next_uniform() * scale;
    return v;
  };
  auto norm = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = 1.0f + 0.1f * next_uniform();
    return v;
  };
  auto bias = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = 0.1f * next_uniform();
    return v;
  };
  const int64_t d = c.dim, kv = c.kv_dim(), q = c.q_dim(), hid = c.hidden_dim, V = c.vocab_size;
  NamedArrays t;
  std::vector<float> embed(static_cast<size_t>(V * d));  // unit scale: RMSNorm follows
  for (float& x : embed) x = next_uniform();
  t.add("model.embed_tokens.weight", {V, d}, std::move(embed));
  for (int l = 0; l < c.n_layers; ++l) {
    t.add(layer_tensor_name(l, "input_layernorm.weight"), {d}, norm(d));
    t.add(layer_tensor_name(l, "self_attn.q_proj.weight"), {q, d}, matrix(q, d));
    t.add(layer_tensor_name(l, "self_attn.k_proj.weight"), {kv, d}, matrix(kv, d));
    t.add(layer_tensor_name(l, "self_attn.v_proj.weight"), {kv, d}, matrix(kv, d));
    if (c.qkv_bias) {  // Qwen2: small biases, as trained ones are next to the projections
      t.add(layer_tensor_name(l, "self_attn.q_proj.bias"), {q}, bias(q));
      t.add(layer_tensor_name(l, "self_attn.k_proj.bias"), {kv}, bias(kv));
      t.add(layer_tensor_name(l, "self_attn.v_proj.bias"), {kv}, bias(kv));
    }
    if (c.qk_norm) {  // Qwen3
      t.add(layer_tensor_name(l, "self_attn.q_norm.weight"), {c.head_dim}, norm(c.head_dim));
      t.add(layer_tensor_name(l, "self_attn.k_norm.weight"), {c.head_dim}, norm(c.head_dim));
    }
    t.add(layer_tensor_name(l, "self_attn.o_proj.weight"), {d, q}, matrix(d, q));
    t.add(layer_tensor_name(l, "post_attention_layernorm.weight"), {d}, norm(d));
    t.add(layer_tensor_name(l, "mlp.gate_proj.weight"), {hid, d}, matrix(hid, d));
    t.add(layer_tensor_name(l, "mlp.down_proj.weight"), {d, hid}, matrix(d, hid));
    t.add(layer_tensor_name(l, "mlp.up_proj.weight"), {hid, d}, matrix(hid, d));
  }
  t.add("model.norm.weight", {d}, norm(d));
  if (!c.tie_word_embeddings) t.add("lm_head.weight", {V, d}, matrix(V, d));
  write_model_dir(c, t, options);
}

}  // namespace tpllama
