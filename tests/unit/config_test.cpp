// config.json parsing: required fields, HF defaults, eos lists, llama3 rope scaling and errors
// that name the offending field; RoPE frequencies against the reference's own computation.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "llama_reference.h"
#include "model/config.h"
#include "model/shapes.h"

namespace tpllama {
namespace {

nlohmann::json base() {
  return {{"hidden_size", 64},        {"intermediate_size", 172}, {"num_hidden_layers", 5},
          {"num_attention_heads", 8}, {"vocab_size", 512},        {"max_position_embeddings", 512}};
}

std::string error_of(const nlohmann::json& j) {
  try {
    parse_llama_config(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, DefaultsFollowHuggingFace) {
  LlamaConfig c = parse_llama_config(base(), "cfg.json");
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.rope_scaling.enabled);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
}

TEST(Config, EosMayBeAList) {
  auto j = base();
  j["eos_token_id"] = {2, 1};
  EXPECT_EQ(parse_llama_config(j, "x").eos_token_ids, (std::vector<int>{2, 1}));
}

TEST(Config, MissingFieldIsNamed) {
  auto j = base();
  j.erase("num_hidden_layers");
  std::string err = error_of(j);
  EXPECT_NE(err.find("num_hidden_layers"), std::string::npos) << err;
  EXPECT_NE(err.find("cfg.json"), std::string::npos) << err;
}

TEST(Config, WrongTypeShowsTheValue) {
  auto j = base();
  j["hidden_size"] = "sixty-four";
  std::string err = error_of(j);
  EXPECT_NE(err.find("hidden_size"), std::string::npos) << err;
  EXPECT_NE(err.find("sixty-four"), std::string::npos) << err;
}

TEST(Config, KvHeadsMustDivideHeads) {
  auto j = base();
  j["num_key_value_heads"] = 3;
  std::string err = error_of(j);
  EXPECT_NE(err.find("(8)"), std::string::npos) << err;
  EXPECT_NE(err.find("(3)"), std::string::npos) << err;
}

TEST(Config, UnknownRopeScalingTypeIsRefused) {
  auto j = base();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(error_of(j).find("yarn"), std::string::npos);
}

TEST(Config, OtherModelTypesAreRefused) {
  auto j = base();
  j["model_type"] = "gemma";
  EXPECT_NE(error_of(j).find("model_type 'gemma' is not supported"), std::string::npos)
      << error_of(j);
  j = base();
  j.erase("model_type");
  j["architectures"] = {"PhiForCausalLM"};
  EXPECT_NE(error_of(j).find("PhiForCausalLM"), std::string::npos) << error_of(j);
  j = base();
  j["model_type"] = "qwen2";
  j["architectures"] = {"LlamaForCausalLM"};
  EXPECT_NE(error_of(j).find("LlamaForCausalLM"), std::string::npos) << error_of(j);
}

// The type fields of a hostile config: wrong JSON types and oversized names are refused by name,
// never read as another type.
TEST(Config, MalformedTypeFieldsAreRefusedByName) {
  auto j = base();
  j["model_type"] = 7;
  EXPECT_NE(error_of(j).find("'model_type' must be a string"), std::string::npos) << error_of(j);
  j = base();
  j["architectures"] = "LlamaForCausalLM";
  EXPECT_NE(error_of(j).find("'architectures' must be a list"), std::string::npos) << error_of(j);
  j = base();
  j["architectures"] = {42};
  EXPECT_NE(error_of(j).find("'architectures' must be a list"), std::string::npos) << error_of(j);
  j = base();
  j["model_type"] = std::string(100000, 'q');
  EXPECT_NE(error_of(j).find("is not supported"), std::string::npos);
  j = base();
  j["sliding_window"] = -4;
  j["model_type"] = "mistral";
  EXPECT_NE(error_of(j).find("sliding_window"), std::string::npos) << error_of(j);
  j = base();
  j["layer_types"] = {{{"nested", {1, 2}}}};
  EXPECT_NE(error_of(j).find("layer_types"), std::string::npos) << error_of(j);
  // An empty list says nothing, and old checkpoints' spelling is the same architecture.
  j = base();
  j["architectures"] = nlohmann::json::array();
  EXPECT_EQ(parse_llama_config(j, "x").model_type, ModelType::kLlama);
  j["architectures"] = {"LLaMAForCausalLM"};
  EXPECT_EQ(parse_llama_config(j, "x").model_type, ModelType::kLlama);
}

TEST(Config, FamiliesReadTheirDifferences) {
  auto j = base();
  j["model_type"] = "mistral";
  j["sliding_window"] = 4096;
  LlamaConfig c = parse_llama_config(j, "x");
  EXPECT_EQ(c.model_type, ModelType::kMistral);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_FALSE(c.qkv_bias || c.qk_norm);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse_llama_config(j, "x").sliding_window, 0);

  j = base();
  j["model_type"] = "qwen2";
  j["sliding_window"] = 32768;  // not applied: use_sliding_window is false
  j["use_sliding_window"] = false;
  c = parse_llama_config(j, "x");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);

  j = base();
  j.erase("model_type");
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 128;
  c = parse_llama_config(j, "x");
  EXPECT_EQ(c.model_type, ModelType::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.head_dim, 128);
  // to_json round-trips the type and its fields.
  EXPECT_EQ(parse_llama_config(c.to_json(), "y").model_type, ModelType::kQwen3);
  j = base();
  j["model_type"] = "mistral";
  j["sliding_window"] = 16;
  EXPECT_EQ(parse_llama_config(parse_llama_config(j, "x").to_json(), "y").sliding_window, 16);
}

TEST(Config, FieldsThatChangeTheComputationAreRefusedByName) {
  struct Case {
    const char* type;
    const char* key;
    nlohmann::json value;
  };
  const Case cases[] = {
      {"llama", "attention_bias", true},
      {"mistral", "attention_bias", true},
      {"qwen3", "attention_bias", true},
      {"llama", "mlp_bias", true},
      {"qwen2", "use_sliding_window", true},
      {"qwen3", "use_sliding_window", true},
      {"qwen2", "use_mrope", true},
      {"qwen3", "layer_types", {"full_attention", "sliding_attention"}},
      {"llama", "partial_rotary_factor", 0.5},
  };
  for (const Case& c : cases) {
    auto j = base();
    j["model_type"] = c.type;
    j[c.key] = c.value;
    EXPECT_NE(error_of(j).find(c.key), std::string::npos) << c.type << " " << error_of(j);
  }
  auto j = base();
  j["model_type"] = "qwen3";
  j["layer_types"] = {"full_attention", "full_attention"};
  j["attention_bias"] = false;
  EXPECT_TRUE(parse_llama_config(j, "x").qk_norm);
}

TEST(Config, Llama3RopeFrequenciesMatchReference) {
  auto j = base();
  j["hidden_size"] = 512;
  j["num_attention_heads"] = 4;  // head_dim 128, as in Llama 3
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  LlamaConfig c = parse_llama_config(j, "x");
  reference::Config rc{};
  rc.dim = 512;
  rc.n_heads = 4;
  rc.rope_theta = 500000.0;
  rc.rope_scaling = {true, 8.0, 1.0, 4.0, 8192};
  std::vector<double> expected = reference::rope_inv_freq(rc);
  std::vector<double> got = c.rope_inv_freq();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-15 + 1e-12 * expected[i]);
  EXPECT_DOUBLE_EQ(got[0], 1.0);  // highest frequency untouched
  EXPECT_NEAR(got.back(), std::pow(500000.0, -126.0 / 128) / 8, 1e-18);  // lowest divided by factor
}

// --vocab on a shape: the vocabulary changes, and special ids it no longer holds become LLaMA-2's.
TEST(ShapeConfig, SmallerVocabularyKeepsValidSpecialIds) {
  const LlamaConfig big = shape_config("llama3-8b");
  EXPECT_EQ(big.bos_token_id, 128000);
  const LlamaConfig small = shape_config("llama3-8b", 512);
  EXPECT_EQ(small.vocab_size, 512);
  EXPECT_EQ(small.bos_token_id, 1);
  EXPECT_EQ(small.eos_token_ids, std::vector<int>{2});
  EXPECT_NO_THROW(small.validate());
  EXPECT_EQ(small.dim, big.dim);
  // Ids inside the vocabulary stay; 0 leaves the shape as it is.
  const LlamaConfig kept = shape_config("llama3-8b", 128001 + 8);
  EXPECT_EQ(kept.bos_token_id, 128000);
  EXPECT_EQ(kept.eos_token_ids, (std::vector<int>{128001, 2}));
  EXPECT_EQ(shape_config("110m", 0).vocab_size, 32000);
  EXPECT_THROW(shape_config("tiny", 2), Error);
}

}  // namespace
}  // namespace tpllama
