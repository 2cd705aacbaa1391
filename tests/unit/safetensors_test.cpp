// The safetensors reader and the checkpoint directory on broken inputs: every corruption must be
// an Error naming the file (and tensor), never a crash. Files are built byte by byte here.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "llama_reference.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "test_util.h"

namespace tpllama {
namespace {

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
  return s;
}

// Writes [u64 header_len][header][data] with header_len given explicitly (may lie).
std::string write_raw(const std::string& name, uint64_t header_len, const std::string& header,
                      size_t data_bytes) {
  std::string path = testing_util::fresh_dir("st_" + name) + "/model.safetensors";
  std::ofstream out(path, std::ios::binary);
  out << le64(header_len) << header << std::string(data_bytes, '\x01');
  return path;
}

std::string write_file(const std::string& name, const std::string& header, size_t data_bytes) {
  return write_raw(name, header.size(), header, data_bytes);
}

// Expects construction to throw an Error whose message contains every needle.
void expect_error(const std::string& path, std::initializer_list<const char*> needles) {
  try {
    SafetensorsFile f(path);
    FAIL() << "no error for " << path;
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    for (const char* n : needles)
      EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

TEST(Safetensors, ReadsAValidFile) {
  std::string path = write_file(
      "valid",
      R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})",
      32);
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.info("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.info("b").dtype, DType::kBF16);
  EXPECT_EQ(f.data(f.info("b")) - f.data(f.info("a")), 24);
}

TEST(Safetensors, FileShorterThanLengthFieldIsAnError) {
  std::string path = testing_util::fresh_dir("st_short") + "/model.safetensors";
  std::ofstream(path, std::ios::binary) << "abc";
  expect_error(path, {"too short"});
}

TEST(Safetensors, HeaderLengthPastEndIsAnError) {
  expect_error(write_raw("hdr_past_end", 1000, R"({})", 0), {"header length 1000", "past the end"});
}

TEST(Safetensors, TruncatedDataIsAnError) {
  expect_error(
      write_file("truncated", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10),
      {"'w'", "past the end"});
}

TEST(Safetensors, OffsetsOutOfRangeAreAnError) {
  expect_error(
      write_file("oob", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[100,104]}})", 8),
      {"'w'", "[100, 104]"});
}

TEST(Safetensors, BackwardOffsetsAreAnError) {
  expect_error(
      write_file("backwards", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8),
      {"'w'", "backwards"});
}

TEST(Safetensors, OverlappingTensorsAreAnError) {
  expect_error(
      write_file(
          "overlap",
          R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
          24),
      {"'a'", "'b'", "overlap"});
}

TEST(Safetensors, OverlapBehindAnEmptyTensorIsAnError) {
  expect_error(
      write_file(
          "overlap_empty",
          R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},"e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
          32),
      {"'a'", "'b'", "overlap"});
}

TEST(Safetensors, ShapeWhoseByteSizeWrapsIsAnError) {
  expect_error(
      write_file("wrap",
                 R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 8),
      {"'w'", "too large"});
}

TEST(Safetensors, DeeplyNestedHeaderValueIsAnErrorNotACrash) {
  std::string deep = std::string(200000, '[') + std::string(200000, ']');
  expect_error(
      write_file("deep", R"({"w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})",
                 8),
      {"header: JSON nested deeper than 256 levels (at byte 282)"});
}

TEST(Safetensors, SizeNotMatchingShapeIsAnError) {
  expect_error(write_file("size", R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}})", 8),
               {"'w'", "need 6"});
}

TEST(Safetensors, UnknownDtypeIsAnError) {
  expect_error(
      write_file("dtype", R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2),
      {"'w'", "F8_E4M3"});
}

TEST(Safetensors, HeaderThatIsNotJsonIsAnError) {
  expect_error(write_file("notjson", "{this is not json}", 0), {"not valid JSON"});
}

TEST(Safetensors, MissingFileIsAnError) {
  expect_error("/nonexistent/dir/model.safetensors",
               {"cannot read weights file", "No such file or directory"});
}

// A small valid model directory written by the reference writer, then damaged in one way.
std::string small_model(const std::string& name, int n_shards = 1) {
  reference::Config c{};
  c.dim = 16;
  c.hidden_dim = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 20;
  c.max_seq_len = 32;
  reference::Weights w = reference::random_weights(c, 1);
  std::string dir = testing_util::fresh_dir("ckpt_" + name);
  reference::write_hf_model(dir, c, &w, "F32", n_shards);
  return dir;
}

std::string load_error(const std::string& dir) {
  try {
    Checkpoint ckpt(dir);
    load_weights(ckpt, Topology::single(ckpt.config().n_layers));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, ShardedDirectoryLoads) {
  std::string dir = small_model("sharded", 3);
  EXPECT_EQ(load_error(dir), "");
  Checkpoint ckpt(dir);
  EXPECT_TRUE(ckpt.contains("lm_head.weight"));
}

TEST(Checkpoint, MissingConfigNamesTheDirectory) {
  std::string dir = small_model("noconfig");
  std::filesystem::remove(dir + "/config.json");
  std::string err = load_error(dir);
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  EXPECT_NE(err.find(dir), std::string::npos) << err;
}

TEST(Checkpoint, MissingShardFileNamesIt) {
  std::string dir = small_model("noshard", 2);
  std::filesystem::remove(dir + "/model-00002-of-00002.safetensors");
  std::string err = load_error(dir);
  EXPECT_NE(err.find("model-00002-of-00002.safetensors"), std::string::npos) << err;
}

TEST(Checkpoint, ShapeDisagreeingWithConfigNamesTensorAndFile) {
  std::string dir = small_model("badshape");
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  cfg["intermediate_size"] = 48;
  std::ofstream(dir + "/config.json") << cfg.dump();
  std::string err = load_error(dir);
  EXPECT_NE(err.find("mlp.gate_proj.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("[32, 16]"), std::string::npos) << err;
}

TEST(Checkpoint, MissingTensorIsNamed) {
  std::string dir = small_model("notensor");
  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  cfg["num_hidden_layers"] = 3;
  std::ofstream(dir + "/config.json") << cfg.dump();
  std::string err = load_error(dir);
  EXPECT_NE(err.find("model.layers.2."), std::string::npos) << err;
}

TEST(Checkpoint, CorruptSafetensorsFails) {
  std::string dir = small_model("corrupt");
  std::filesystem::resize_file(dir + "/model.safetensors", 100);
  std::string err = load_error(dir);
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
}

}  // namespace
}  // namespace tpllama
