// Independent oracle for the LLaMA forward pass: plain double-precision loops written straight
// from the equations, plus a llama2.c checkpoint reader, seeded random weights and a minimal
// Hugging Face (config.json + safetensors) writer. Shares no code with src/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace reference {

// HF rotate-half pairs (j, j+hd/2); Meta/llama2.c interleaved pairs (2i, 2i+1).
enum class RopeLayout { kRotateHalf, kInterleaved };

struct Llama3RopeScaling {
  bool enabled = false;
  double factor = 8, low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position_embeddings = 8192;
};

// The LLaMA-family architectures, each LLaMA's block with its own difference (Hugging Face
// transformers' semantics).
enum class Family {
  kLlama,
  kMistral,  // sliding_window: position p attends to keys p - W + 1 .. p (W keys, itself included)
  kQwen2,    // biases on q_proj, k_proj and v_proj (none on o_proj or the MLP)
  kQwen3,    // q_norm, k_norm: RMSNorm of each head's q and k (one head_dim weight) before RoPE
};

struct Config {
  int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len;
  Family family = Family::kLlama;
  int sliding_window = 0;  // Mistral; 0: full attention
  int head_dim = 0;        // 0 -> dim / n_heads
  double rms_norm_eps = 1e-5, rope_theta = 10000;
  Llama3RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  int bos_token_id = 1;
  std::vector<int> eos_token_ids{2};
};

// All matrices row-major [out][in], so y = W x.
struct LayerWeights {
  std::vector<double> attn_norm;       // [dim]
  std::vector<double> wq;              // [n_heads*hd][dim]
  std::vector<double> wk;              // [n_kv*hd][dim]
  std::vector<double> wv;              // [n_kv*hd][dim]
  std::vector<double> bq, bk, bv;      // Qwen2: [n_heads*hd], [n_kv*hd], [n_kv*hd]; else empty
  std::vector<double> q_norm, k_norm;  // Qwen3: [hd] each; else empty
  std::vector<double> wo;              // [dim][n_heads*hd]
  std::vector<double> ffn_norm;        // [dim]
  std::vector<double> w1;              // gate [hidden][dim]
  std::vector<double> w2;              // down [dim][hidden]
  std::vector<double> w3;              // up [hidden][dim]
};

struct Weights {
  std::vector<double> embed;  // [vocab][dim]
  std::vector<LayerWeights> layers;
  std::vector<double> final_norm;  // [dim]
  std::vector<double> lm_head;     // [vocab][dim]; equal to embed when tied
};

// head_dim with the 0 -> dim / n_heads default applied.
int effective_head_dim(const Config& config);

// RoPE inverse frequencies inv_freq[i], i in [0, head_dim/2), with Llama-3 scaling if enabled.
std::vector<double> rope_inv_freq(const Config& config);

// Logits [tokens.size()][vocab] at every position of one sequence (causal attention,
// position p = index).
std::vector<std::vector<double>> forward_all(const Config& config, const Weights& weights,
                                             const std::vector<int>& tokens, RopeLayout layout);

// Reads a llama2.c "version 0" checkpoint (.bin). Weights stay in Meta's interleaved RoPE
// layout (use RopeLayout::kInterleaved with them). Sets eps 1e-5, theta 10000, bos 1,
// eos {1, 2}, tie_word_embeddings when the header vocab_size is positive. Throws on error.
Weights load_llama2c(const std::string& path, Config* config);

// Seeded random weights (splitmix64): matrices uniform in +-1/sqrt(fan_in), norms 1 +- 0.1,
// embeddings uniform +-1, Qwen2's biases +-0.5, Qwen3's q/k norms 1 +- 0.5; lm_head = embed when
// tied. Deterministic for a seed (a LLaMA's draws do not depend on the family fields).
Weights random_weights(const Config& config, uint64_t seed);

// Rounds x to the nearest value of dtype "F32", "F16" or "BF16" (round-to-nearest-even).
double round_to_dtype(double x, const std::string& dtype);

// Writes a Hugging Face LLaMA directory (config.json + safetensors, sharded with an index
// when n_shards > 1). Values are rounded to dtype and *weights is updated in place to the
// rounded values. Weights are written in the layout given (HF expects rotate-half).
void write_hf_model(const std::string& dir, const Config& config, Weights* weights,
                    const std::string& dtype, int n_shards = 1);

}  // namespace reference
