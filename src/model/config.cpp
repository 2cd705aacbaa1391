// config.json parsing: required LlamaForCausalLM fields, HF defaults for the optional ones, and
// checks with the numbers in the message.
#include "model/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"

namespace tpllama {
namespace {

// Upper bounds on config.json's sizes. They keep every size product in range: a context of
// kMaxPositions plus a KV block still fits an int, and a width times a width (a matrix's elements)
// or a position times a width fits 64 bits with room. Real models sit far below them (Llama 3.1
// 405B: hidden 16384, intermediate 53248, 126 layers, vocabulary 128256, context 131072).
constexpr int64_t kMaxWidth = int64_t{1} << 20;      // hidden_size, intermediate_size, head_dim
constexpr int64_t kMaxLayers = int64_t{1} << 16;     // num_hidden_layers
constexpr int64_t kMaxHeads = int64_t{1} << 16;      // num_attention_heads, num_key_value_heads
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;  // vocab_size
constexpr int64_t kMaxPositions = int64_t{1} << 24;  // max_position_embeddings

// JSON integers are read as 64-bit so that a value past 2^31 is refused with its digits, never
// wrapped into a small one (2^32 + 5 layers read as 5).
int64_t read_int64(const nlohmann::json& v, const char* key, const std::string& source) {
  if (!v.is_number_integer())
    fail(source, ": field '", key, "' must be an integer, got ", describe_json(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(source, ": field '", key, "' is ", v.get<uint64_t>(), ", more than tpllama supports");
  return v.get<int64_t>();
}

// An integer field bounded to [lo, hi] (sizes, ids): the bounds keep every product of sizes the
// model computes inside its integer types.
int bounded_int(const nlohmann::json& j, const char* key, int64_t lo, int64_t hi,
                const std::string& source) {
  if (!j.contains(key)) fail(source, ": missing required field '", key, "'");
  const int64_t v = read_int64(j.at(key), key, source);
  if (v < lo) fail(source, ": field '", key, "' must be at least ", lo, ", got ", v);
  if (v > hi)
    fail(source, ": field '", key, "' is ", v, ", more than the ", hi, " tpllama supports");
  return static_cast<int>(v);
}

int required_size(const nlohmann::json& j, const char* key, int64_t hi, const std::string& source) {
  return bounded_int(j, key, 1, hi, source);
}

int optional_size(const nlohmann::json& j, const char* key, int fallback, int64_t hi,
                  const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return required_size(j, key, hi, source);
}

int optional_token_id(const nlohmann::json& j, const char* key, int fallback,
                      const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return bounded_int(j, key, 0, kMaxVocabSize - 1, source);
}

double optional_number(const nlohmann::json& j, const char* key, double fallback,
                       const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  const auto& v = j.at(key);
  if (!v.is_number()) fail(source, ": field '", key, "' must be a number, got ", describe_json(v));
  return v.get<double>();
}

RopeScaling parse_rope_scaling(const nlohmann::json& j, const std::string& source) {
  RopeScaling s;
  if (!j.contains("rope_scaling") || j.at("rope_scaling").is_null()) return s;
  const auto& r = j.at("rope_scaling");
  if (!r.is_object()) fail(source, ": 'rope_scaling' must be an object, got ", describe_json(r));
  std::string type = r.value("rope_type", r.value("type", std::string()));
  if (type == "default") return s;
  if (type != "llama3")
    fail(source, ": rope_scaling type '", type, "' is not supported (supported: llama3, default)");
  s.enabled = true;
  s.factor = optional_number(r, "factor", 8.0, source);
  s.low_freq_factor = optional_number(r, "low_freq_factor", 1.0, source);
  s.high_freq_factor = optional_number(r, "high_freq_factor", 4.0, source);
  s.original_max_position_embeddings =
      optional_size(r, "original_max_position_embeddings", 8192, kMaxPositions, source);
  if (s.factor <= 0 || s.high_freq_factor <= s.low_freq_factor ||
      s.original_max_position_embeddings <= 0)
    fail(source, ": invalid llama3 rope_scaling (factor ", s.factor, ", low_freq_factor ",
         s.low_freq_factor, ", high_freq_factor ", s.high_freq_factor,
         ", original_max_position_embeddings ", s.original_max_position_embeddings, ")");
  return s;
}

std::vector<int> parse_eos(const nlohmann::json& j, const std::string& source) {
  if (!j.contains("eos_token_id") || j.at("eos_token_id").is_null()) return {2};
  const auto& v = j.at("eos_token_id");
  auto id = [&](const nlohmann::json& e) {
    const int64_t value = read_int64(e, "eos_token_id", source);
    if (value < 0 || value >= kMaxVocabSize)
      fail(source, ": 'eos_token_id' ", value, " is outside [0, ", kMaxVocabSize, ")");
    return static_cast<int>(value);
  };
  if (v.is_number_integer()) return {id(v)};
  if (v.is_array()) {
    std::vector<int> ids;
    for (const auto& e : v) {
      if (!e.is_number_integer())
        fail(source, ": 'eos_token_id' entries must be integers, got ", describe_json(e));
      ids.push_back(id(e));
    }
    return ids;
  }
  fail(source, ": 'eos_token_id' must be an integer or a list of integers, got ", describe_json(v));
}

// The group size of a quantization_config tpllama reads (its own int8); any other is refused by
// name, before a quantized tensor is misread.
int parse_quantization(const nlohmann::json& q, const std::string& source) {
  if (!q.is_object())
    fail(source, ": 'quantization_config' must be an object, got ", describe_json(q));
  const std::string method =
      q.contains("quant_method") && q.at("quant_method").is_string()
          ? q.at("quant_method").get<std::string>()
          : describe_json(q.contains("quant_method") ? q.at("quant_method") : nlohmann::json());
  if (method != kInt8QuantMethod)
    fail(
        source, ": quantization_config.quant_method '", method,
        "' is not supported: tpllama reads f32, f16 and bf16 checkpoints (quantizing them with "
        "--dtype int8 at "
        "load) and the int8 checkpoints `tpllama convert/shard --dtype int8` write (quant_method '",
        kInt8QuantMethod, "')");
  if (bounded_int(q, "bits", 1, 64, source + " quantization_config") != 8)
    fail(source, ": quantization_config.bits is ", q.at("bits").dump(), "; ", kInt8QuantMethod,
         " weights are 8-bit");
  return bounded_int(q, "group_size", 1, kMaxWidth, source + " quantization_config");
}

struct TypeNames {
  ModelType type;
  const char* name;          // config.json's model_type
  const char* architecture;  // its architectures[0]
};
constexpr TypeNames kTypes[] = {
    {ModelType::kLlama, "llama", "LlamaForCausalLM"},
    {ModelType::kMistral, "mistral", "MistralForCausalLM"},
    {ModelType::kQwen2, "qwen2", "Qwen2ForCausalLM"},
    {ModelType::kQwen3, "qwen3", "Qwen3ForCausalLM"},
};
constexpr const char* kSupportedTypes = "llama, mistral, qwen2, qwen3";

bool optional_bool(const nlohmann::json& j, const char* key, bool fallback,
                   const std::string& source) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean())
    fail(source, ": '", key, "' must be true or false, got ", describe_json(j.at(key)));
  return j.at(key).get<bool>();
}

// model_type, or (without one) the architecture architectures names; a config whose architectures
// name another model than its model_type is refused, never run as either.
ModelType parse_model_type(const nlohmann::json& j, const std::string& source) {
  // Its first entry (old LLaMA checkpoints spell it "LLaMAForCausalLM": names compare
  // case-insensitively); an empty list says nothing.
  std::string architecture;
  if (j.contains("architectures") && !j.at("architectures").is_null()) {
    const auto& a = j.at("architectures");
    if (!a.is_array() || (!a.empty() && !a[0].is_string()))
      fail(source, ": 'architectures' must be a list of names, got ", describe_json(a));
    if (!a.empty()) architecture = a[0].get<std::string>();
  }
  const auto same_name = [](const std::string& x, const char* y) {
    return std::equal(x.begin(), x.end(), y, y + std::strlen(y), [](char p, char q) {
      return std::tolower(static_cast<unsigned char>(p)) ==
             std::tolower(static_cast<unsigned char>(q));
    });
  };
  const TypeNames* found = nullptr;
  if (j.contains("model_type") && !j.at("model_type").is_null()) {
    if (!j.at("model_type").is_string())
      fail(source, ": 'model_type' must be a string, got ", describe_json(j.at("model_type")));
    const std::string name = j.at("model_type").get<std::string>();
    for (const TypeNames& t : kTypes)
      if (name == t.name) found = &t;
    if (found == nullptr)
      fail(source, ": model_type '", name, "' is not supported (tpllama runs the model types ",
           kSupportedTypes, ")");
  } else {
    for (const TypeNames& t : kTypes)
      if (same_name(architecture, t.architecture)) found = &t;
    if (found == nullptr && !architecture.empty())
      fail(source, ": architecture '", architecture, "' is not supported (tpllama runs ",
           "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM)");
    if (found == nullptr) found = &kTypes[0];
  }
  if (!architecture.empty() && !same_name(architecture, found->architecture))
    fail(source, ": architectures names '", architecture, "' but model_type '", found->name,
         "' is run as ", found->architecture, "; tpllama runs only causal LMs of these types");
  return found->type;
}

// A field that changes the computation and that tpllama does not implement is refused by name at
// load, never ignored: each names the value that would be honoured (or null).
void refuse_unimplemented(const nlohmann::json& j, ModelType type, const std::string& source) {
  const std::string name = model_type_name(type);
  auto refuse_true = [&](const char* key, const std::string& what) {
    if (optional_bool(j, key, false, source))
      fail(source, ": ", key, " true (", what, ") is not supported for model_type '", name, "'");
  };
  // Qwen2 always has q/k/v biases and no attention_bias key; the others would add o_proj's too.
  if (type != ModelType::kQwen2)
    refuse_true("attention_bias", "biases on q_proj, k_proj, v_proj and o_proj");
  refuse_true("mlp_bias", "biases on gate_proj, up_proj and down_proj");
  refuse_true("use_mrope", "multimodal RoPE");
  if (type == ModelType::kQwen2 || type == ModelType::kQwen3)
    refuse_true("use_sliding_window",
                "sliding-window attention on the layers past max_window_layers; the released "
                "checkpoints set it false");
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const auto& l = j.at("layer_types");
    if (!l.is_array()) fail(source, ": 'layer_types' must be a list, got ", describe_json(l));
    for (const auto& e : l)
      if (e != "full_attention")
        fail(source, ": layer_types entry ", describe_json(e),
             " is not supported (tpllama runs layers of \"full_attention\", with a model-wide "
             "sliding_window for mistral)");
  }
  if (j.contains("partial_rotary_factor") && !j.at("partial_rotary_factor").is_null() &&
      optional_number(j, "partial_rotary_factor", 1.0, source) != 1.0)
    fail(source, ": partial_rotary_factor ", j.at("partial_rotary_factor").dump(),
         " is not supported (RoPE over the whole head)");
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (j.contains(key) && !j.at(key).is_null())
      fail(source, ": ", key, " ", j.at(key).dump(), " is not supported");
}

}  // namespace

const char* model_type_name(ModelType type) {
  for (const TypeNames& t : kTypes)
    if (t.type == type) return t.name;
  return "?";
}

const char* model_architecture_name(ModelType type) {
  for (const TypeNames& t : kTypes)
    if (t.type == type) return t.architecture;
  return "?";
}

LlamaConfig parse_llama_config(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) fail(source, ": expected a JSON object");
  LlamaConfig c;
  c.model_type = parse_model_type(j, source);
  refuse_unimplemented(j, c.model_type, source);
  c.qkv_bias = c.model_type == ModelType::kQwen2;
  c.qk_norm = c.model_type == ModelType::kQwen3;
  // Mistral's window (null: full attention). Qwen's sliding_window applies only with
  // use_sliding_window, refused above, so it is not read.
  if (c.model_type == ModelType::kMistral)
    c.sliding_window = optional_size(j, "sliding_window", 0, kMaxPositions, source);
  c.dim = required_size(j, "hidden_size", kMaxWidth, source);
  c.hidden_dim = required_size(j, "intermediate_size", kMaxWidth, source);
  c.n_layers = required_size(j, "num_hidden_layers", kMaxLayers, source);
  c.n_heads = required_size(j, "num_attention_heads", kMaxHeads, source);
  c.n_kv_heads = optional_size(j, "num_key_value_heads", c.n_heads, kMaxHeads, source);
  c.vocab_size = required_size(j, "vocab_size", kMaxVocabSize, source);
  c.max_seq_len = optional_size(j, "max_position_embeddings", 2048, kMaxPositions, source);
  c.head_dim = optional_size(j, "head_dim", c.dim / c.n_heads, kMaxWidth, source);
  c.rms_norm_eps = optional_number(j, "rms_norm_eps", 1e-6, source);
  c.rope_theta = optional_number(j, "rope_theta", 10000.0, source);
  c.rope_scaling = parse_rope_scaling(j, source);
  if (j.contains("tie_word_embeddings")) {
    if (!j.at("tie_word_embeddings").is_boolean())
      fail(source, ": 'tie_word_embeddings' must be true or false, got ",
           describe_json(j.at("tie_word_embeddings")));
    c.tie_word_embeddings = j.at("tie_word_embeddings").get<bool>();
  }
  c.bos_token_id = optional_token_id(j, "bos_token_id", 1, source);
  c.eos_token_ids = parse_eos(j, source);
  if (j.contains("quantization_config") && !j.at("quantization_config").is_null())
    c.int8_group_size = parse_quantization(j.at("quantization_config"), source);
  if (j.contains("hidden_act") && j.at("hidden_act") != "silu")
    fail(source, ": hidden_act ", describe_json(j.at("hidden_act")),
         " is not supported (LLaMA uses silu)");
  try {
    c.validate();
  } catch (const Error& e) {
    fail(source, ": ", e.what());
  }
  return c;
}

void LlamaConfig::validate() const {
  auto positive = [](const char* name, int v) {
    if (v <= 0) fail(name, " must be positive, got ", v);
  };
  positive("hidden_size", dim);
  positive("intermediate_size", hidden_dim);
  positive("num_hidden_layers", n_layers);
  positive("num_attention_heads", n_heads);
  positive("num_key_value_heads", n_kv_heads);
  positive("head_dim", head_dim);
  positive("vocab_size", vocab_size);
  positive("max_position_embeddings", max_seq_len);
  auto at_most = [](const char* name, int64_t v, int64_t limit) {
    if (v > limit) fail(name, " is ", v, ", more than the ", limit, " tpllama supports");
  };
  at_most("hidden_size", dim, kMaxWidth);
  at_most("intermediate_size", hidden_dim, kMaxWidth);
  at_most("num_hidden_layers", n_layers, kMaxLayers);
  at_most("num_attention_heads", n_heads, kMaxHeads);
  at_most("num_key_value_heads", n_kv_heads, kMaxHeads);
  at_most("head_dim", head_dim, kMaxWidth);
  at_most("vocab_size", vocab_size, kMaxVocabSize);
  at_most("max_position_embeddings", max_seq_len, kMaxPositions);
  // q_dim() and kv_dim() are ints, and rows of q_proj.
  at_most("num_attention_heads × head_dim", static_cast<int64_t>(n_heads) * head_dim, kMaxWidth);
  if (n_heads % n_kv_heads != 0)
    fail("num_attention_heads (", n_heads, ") must be a multiple of num_key_value_heads (",
         n_kv_heads, ")");
  if (head_dim % 2 != 0) fail("head_dim (", head_dim, ") must be even for RoPE");
  if (!(rms_norm_eps > 0)) fail("rms_norm_eps must be positive, got ", rms_norm_eps);
  if (!(rope_theta > 0)) fail("rope_theta must be positive, got ", rope_theta);
  if (sliding_window < 0) fail("sliding_window must be positive or null, got ", sliding_window);
  if (bos_token_id < 0 || bos_token_id >= vocab_size)
    fail("bos_token_id ", bos_token_id, " is outside the vocabulary [0, ", vocab_size, ")");
  for (int id : eos_token_ids)
    if (id < 0 || id >= vocab_size)
      fail("eos_token_id ", id, " is outside the vocabulary [0, ", vocab_size, ")");
}

nlohmann::json LlamaConfig::to_json() const {
  nlohmann::json j = {
      {"architectures", {model_architecture_name(model_type)}},
      {"model_type", model_type_name(model_type)},
      {"hidden_size", dim},
      {"intermediate_size", hidden_dim},
      {"num_hidden_layers", n_layers},
      {"num_attention_heads", n_heads},
      {"num_key_value_heads", n_kv_heads},
      {"head_dim", head_dim},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_seq_len},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"tie_word_embeddings", tie_word_embeddings},
      {"hidden_act", "silu"},
      {"bos_token_id", bos_token_id},
      {"torch_dtype", "float32"},
  };
  if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids[0];
  else
    j["eos_token_id"] = eos_token_ids;
  if (rope_scaling.enabled)
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", rope_scaling.factor},
        {"low_freq_factor", rope_scaling.low_freq_factor},
        {"high_freq_factor", rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  else
    j["rope_scaling"] = nullptr;
  if (model_type == ModelType::kMistral)
    j["sliding_window"] = sliding_window > 0 ? nlohmann::json(sliding_window) : nlohmann::json();
  if (model_type == ModelType::kQwen2 || model_type == ModelType::kQwen3)
    j["use_sliding_window"] = false;
  if (model_type == ModelType::kQwen3) j["attention_bias"] = false;
  if (int8_group_size > 0) j["quantization_config"] = int8_quantization_json(int8_group_size);
  return j;
}

std::vector<double> LlamaConfig::rope_inv_freq() const {
  const double kPi = 3.14159265358979323846;
  std::vector<double> inv(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = std::pow(rope_theta, -2.0 * static_cast<double>(i) / head_dim);
  if (!rope_scaling.enabled) return inv;
  const RopeScaling& s = rope_scaling;
  const double low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
  const double high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
  for (double& f : inv) {
    double wavelen = 2 * kPi / f;
    if (wavelen < high_freq_wavelen) continue;  // high frequencies are kept
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else {  // smooth blend between the two regimes
      double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                      (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

nlohmann::json int8_quantization_json(int group_size) {
  return {
      {"quant_method", kInt8QuantMethod},
      {"bits", 8},
      {"group_size", group_size},
      {"symmetric", true},
      {"description",
       "every weight matrix but the embedding is I8 <name> with F32 <name>_scale of shape [rows, "
       "ceil(cols / group_size)]: w = q * scale per row and group of group_size columns"}};
}

LlamaConfig load_llama_config(const std::string& path) {
  const std::string text = read_regular_file(path, "model config", kMaxSmallFileBytes);
  nlohmann::json j;
  try {
    j = parse_json(text, path);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  return parse_llama_config(j, path);
}

unsigned long long LlamaConfig::parameter_count() const {
  using u64 = unsigned long long;
  const u64 d = static_cast<u64>(dim), v = static_cast<u64>(vocab_size);
  const u64 q = static_cast<u64>(q_dim()), kv = static_cast<u64>(kv_dim());
  const u64 layer = 2 * d + d * q * 2 + d * kv * 2 + 3 * d * static_cast<u64>(hidden_dim) +
                    (qkv_bias ? q + 2 * kv : 0) + (qk_norm ? 2 * static_cast<u64>(head_dim) : 0);
  return v * d * (tie_word_embeddings ? 1 : 2) + static_cast<u64>(n_layers) * layer + d;
}

}  // namespace tpllama
