// LlamaConfig: the architecture numbers of a LLaMA-family model, read from a Hugging Face
// config.json (LlamaForCausalLM fields) and validated before any weight is touched.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tpllama {

// Llama-3 style frequency-dependent RoPE scaling ("rope_type": "llama3").
struct RopeScaling {
  bool enabled = false;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// The architectures of the LLaMA family tpllama runs: LLaMA's block, plus what each adds.
enum class ModelType {
  kLlama,    // LlamaForCausalLM
  kMistral,  // MistralForCausalLM: optional sliding-window attention
  kQwen2,    // Qwen2ForCausalLM (Qwen2, Qwen2.5): biases on q, k and v
  kQwen3,    // Qwen3ForCausalLM: per-head RMSNorm of q and k before RoPE
};
const char* model_type_name(ModelType type);          // config.json's model_type: "qwen2"
const char* model_architecture_name(ModelType type);  // its architectures[0]: "Qwen2ForCausalLM"

struct LlamaConfig {
  ModelType model_type = ModelType::kLlama;
  int dim = 0;         // hidden_size
  int hidden_dim = 0;  // intermediate_size
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_seq_len = 0;  // max_position_embeddings
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  int bos_token_id = 1;
  std::vector<int> eos_token_ids{2};
  // Attention sees only the last sliding_window positions, its own included (Mistral); 0: all.
  int sliding_window = 0;
  bool qkv_bias = false;  // q_proj, k_proj and v_proj have biases (Qwen2)
  bool qk_norm = false;   // q_norm and k_norm: RMSNorm of each head's q and k before RoPE (Qwen3)
  // An int8 checkpoint's group size (config.json's quantization_config, quant_method
  // kInt8QuantMethod); 0: the weights are f32, f16 or bf16.
  int int8_group_size = 0;

  int q_dim() const { return n_heads * head_dim; }
  // Elements of all weights as a checkpoint stores them (one embedding when tied).
  unsigned long long parameter_count() const;
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Throws naming the field and value when a number is missing or inconsistent.
  void validate() const;
  nlohmann::json to_json() const;
  // RoPE inverse frequencies, head_dim / 2 of them, with rope_scaling applied.
  std::vector<double> rope_inv_freq() const;
};

// The quantization_config.quant_method of the int8 checkpoints `tpllama convert/shard --dtype int8`
// write: every weight matrix but the embedding as I8 `<name>` with F32 `<name>_scale` (rows,
// ceil(cols / group_size)), w = q × scale per row and group of group_size columns.
inline constexpr const char* kInt8QuantMethod = "tpllama-int8";

// config.json's quantization_config of an int8 checkpoint.
nlohmann::json int8_quantization_json(int group_size);

// `source` names the file in error messages.
LlamaConfig parse_llama_config(const nlohmann::json& j, const std::string& source);
LlamaConfig load_llama_config(const std::string& path);

}  // namespace tpllama
