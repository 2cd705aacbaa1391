// config.json sizes past 2^31 or past what tpllama's arithmetic holds: each refused naming the
// field and the value as written, never wrapped into a small number.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

namespace tpllama {
namespace {

nlohmann::json base() {
  return {{"hidden_size", 64},        {"intermediate_size", 172}, {"num_hidden_layers", 5},
          {"num_attention_heads", 8}, {"vocab_size", 512},        {"max_position_embeddings", 512}};
}

std::string error_with(const char* key, const nlohmann::json& value) {
  nlohmann::json j = base();
  j[key] = value;
  try {
    parse_llama_config(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_refused(const char* key, const nlohmann::json& value, const std::string& digits) {
  const std::string err = error_with(key, value);
  EXPECT_NE(err.find(key), std::string::npos) << key << ": " << err;
  EXPECT_NE(err.find(digits), std::string::npos) << key << ": " << err;
}

TEST(ConfigLimits, LayersPast2To32AreNotWrapped) {
  expect_refused("num_hidden_layers", (int64_t{1} << 32) + 5, "4294967301");
}

TEST(ConfigLimits, VocabOf2To40IsRefusedWithItsValue) {
  expect_refused("vocab_size", int64_t{1} << 40, "1099511627776");
}

TEST(ConfigLimits, EveryWidthPast2To31IsRefused) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads", "head_dim"})
    expect_refused(key, (int64_t{1} << 31) + 8, "2147483656");
}

TEST(ConfigLimits, ContextTheKvArithmeticCannotHoldIsRefused) {
  expect_refused("max_position_embeddings", 2147483647, "2147483647");
}

TEST(ConfigLimits, ContextOfTenMillionIsAccepted) {
  nlohmann::json j = base();
  j["max_position_embeddings"] = 10485760;  // Llama 4 Scout
  EXPECT_EQ(parse_llama_config(j, "cfg.json").max_seq_len, 10485760);
}

TEST(ConfigLimits, UnsignedPastInt64IsRefused) {
  expect_refused("vocab_size", uint64_t{18446744073709551615ull}, "18446744073709551615");
}

TEST(ConfigLimits, TokenIdsPast2To31AreRefused) {
  expect_refused("bos_token_id", (int64_t{1} << 32) + 1, "4294967297");
  expect_refused("eos_token_id", (int64_t{1} << 32) + 2, "4294967298");
}

TEST(ConfigLimits, NegativeSizeIsRefusedWithItsValue) {
  expect_refused("num_hidden_layers", -(int64_t{1} << 32), "-4294967296");
}

TEST(ConfigLimits, HeadsTimesHeadDimPastTheWidthLimitIsRefused) {
  nlohmann::json j = base();
  j["num_attention_heads"] = 65536;
  j["num_key_value_heads"] = 1;
  j["head_dim"] = 65536;
  try {
    parse_llama_config(j, "cfg.json");
    ADD_FAILURE() << "accepted 65536 heads of 65536";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpllama
