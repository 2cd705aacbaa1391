// int8 checkpoints (`convert` / `shard --dtype int8`): the quantization they store is the closed
// form of ops/cpu/gemm.h; loading one as int8 packs, byte for byte, what quantizing the f32
// original at load packs, in every layout and from shard files; held as f32 its matrices are q ×
// scale; and every malformed one is refused before a weight is read, naming the tensor or the
// field.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "llama_reference.h"
#include "model/checkpoint.h"
#include "model/llama2c.h"
#include "model/recode.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/shard_table.h"
#include "model/shard_writer.h"
#include "model/weights.h"
#include "ops/weight.h"
#include "test_util.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

TEST(Int8Quantization, IsSymmetricPerRowAndGroupOf128) {
  const int64_t rows = 37, cols = 300, group = 128, groups = 3;
  ASSERT_EQ(ops::int8_group_size(), group);
  ASSERT_EQ(ops::int8_scale_cols(cols), groups);
  std::vector<float> w = gaussian(rows * cols, 1);
  for (int64_t c = 128; c < 256; ++c)
    w[static_cast<size_t>(5 * cols + c)] = 0.0f;   // an all-zero group
  w[static_cast<size_t>(9 * cols + 299)] = -3.0f;  // an outlier in a short group
  std::vector<int8_t> q(static_cast<size_t>(rows * cols));
  std::vector<float> scales(static_cast<size_t>(rows * groups));
  ops::quantize_int8_weight(w.data(), rows, cols, q.data(), scales.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(cols, begin + group);
      double amax = 0;
      for (int64_t c = begin; c < end; ++c)
        amax = std::max(amax, std::abs(static_cast<double>(w[r * cols + c])));
      const float scale = scales[static_cast<size_t>(r * groups + g)];
      EXPECT_NEAR(scale, amax / 127, amax / 127 * 1e-6) << "row " << r << " group " << g;
      int largest = 0;
      for (int64_t c = begin; c < end; ++c) {
        const int qv = q[static_cast<size_t>(r * cols + c)];
        EXPECT_LE(std::abs(qv), 127);
        largest = std::max(largest, std::abs(qv));
        // Round to nearest: within half a step of the weight.
        EXPECT_LE(std::abs(qv * static_cast<double>(scale) - w[static_cast<size_t>(r * cols + c)]),
                  scale * 0.5000001)
            << "row " << r << " column " << c;
      }
      EXPECT_EQ(largest, amax > 0 ? 127 : 0) << "row " << r << " group " << g;
    }
  EXPECT_EQ(scales[5 * groups + 1], 0.0f);
  EXPECT_EQ(q[static_cast<size_t>(9 * cols + 299)], -127);
}

TEST(Int8Quantization, PackingTheQuantizedRowsIsPackingTheirF32) {
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {31, 5}, {32, 128}, {33, 129}, {70, 300}, {64, 512}}) {
    const std::vector<float> w = gaussian(rows * cols, static_cast<uint32_t>(rows * 1000 + cols));
    const size_t bytes = ops::weight_bytes(DeviceContext{}, rows, cols, DType::kI8);
    std::vector<uint8_t> q(static_cast<size_t>(rows * cols));
    std::vector<float> scales(static_cast<size_t>(rows * ops::int8_scale_cols(cols)));
    ops::quantize_int8_weight(w.data(), rows, cols, reinterpret_cast<int8_t*>(q.data()),
                              scales.data());
    Buffer from_f32(bytes), from_q(bytes);
    ops::pack_weight(DeviceContext{},
                     Tensor(const_cast<float*>(w.data()), DType::kF32, {rows, cols}), DType::kI8,
                     from_f32.data());
    const ops::Weight packed =
        ops::pack_int8_weight(DeviceContext{}, reinterpret_cast<int8_t*>(q.data()), scales.data(),
                              rows, cols, from_q.data());
    EXPECT_EQ(packed.nbytes, bytes);
    EXPECT_EQ(std::memcmp(from_f32.data(), from_q.data(), bytes), 0) << rows << " x " << cols;
  }
}

// 256 and 512 wide, so TP 2 splits o_proj and down_proj into whole groups; a vocabulary that TP 2
// pads; an untied head (quantized in the file) and, in the second config, a tied one (not).
LlamaConfig aligned_config(bool tied) {
  LlamaConfig c;
  c.dim = 256;
  c.hidden_dim = 512;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 301;
  c.max_seq_len = 64;
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<const ops::Weight*> matrices(const ModelWeights& w) {
  std::vector<const ops::Weight*> out;
  for (const LayerWeights& l : w.layers)
    for (const ops::Weight* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w3, &l.w2}) out.push_back(m);
  if (!w.lm_head.empty()) out.push_back(&w.lm_head);
  return out;
}

void expect_same_bytes(const ModelWeights& a, const ModelWeights& b, const std::string& what) {
  const auto ma = matrices(a), mb = matrices(b);
  ASSERT_EQ(ma.size(), mb.size()) << what;
  for (size_t i = 0; i < ma.size(); ++i) {
    ASSERT_EQ(ma[i]->dtype, DType::kI8) << what;
    ASSERT_EQ(mb[i]->dtype, DType::kI8) << what;
    ASSERT_EQ(ma[i]->nbytes, mb[i]->nbytes) << what << " matrix " << i;
    EXPECT_EQ(std::memcmp(ma[i]->data, mb[i]->data, ma[i]->nbytes), 0) << what << " matrix " << i;
  }
}

class Int8Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (fs::temp_directory_path() / ("tpllama_int8_ckpt_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The same seeded model as f32 and as an int8 checkpoint.
  void convert_both(bool tied) {
    write_random_model(aligned_config(tied), 11, ConvertOptions{dir_ + "/f32", "", DType::kF32});
    write_random_model(aligned_config(tied), 11, ConvertOptions{dir_ + "/int8", "", DType::kI8});
  }

  // The int8 checkpoint's file rewritten by `edit`, which may change or drop its tensors.
  void rewrite(const std::function<void(std::vector<RawTensor>&)>& edit) {
    const std::string path = dir_ + "/int8/model.safetensors";
    std::vector<RawTensor> tensors;
    {
      SafetensorsFile f(path);
      for (const auto& [name, t] : f.tensors())
        tensors.push_back({name, t.shape, t.dtype,
                           std::vector<uint8_t>(f.data(t), f.data(t) + (t.end - t.begin))});
    }
    edit(tensors);
    write_safetensors(path, tensors);
  }
  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    const std::string path = dir_ + "/int8/config.json";
    nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
    edit(j);
    std::ofstream(path) << j.dump();
  }
  std::string load_error(const std::string& model) {
    return testing_util::error_of([&] {
      Checkpoint ckpt(model);
      load_weights(ckpt, Topology::single(ckpt.config().n_layers), DeviceContext{}, DType::kI8);
    });
  }

  std::string dir_;
};

TEST_F(Int8Checkpoint, StoresEveryMatrixButTheEmbeddingAsI8WithF32Scales) {
  convert_both(/*tied=*/false);
  SafetensorsFile f(dir_ + "/int8/model.safetensors");
  EXPECT_EQ(f.info("model.embed_tokens.weight").dtype, DType::kF32);
  EXPECT_EQ(f.info("model.layers.1.input_layernorm.weight").dtype, DType::kF32);
  EXPECT_EQ(f.info("lm_head.weight").dtype, DType::kI8);
  EXPECT_EQ(f.info("model.layers.0.mlp.down_proj.weight").dtype, DType::kI8);
  const TensorInfo& scale = f.info("model.layers.0.mlp.down_proj.weight_scale");
  EXPECT_EQ(scale.dtype, DType::kF32);
  EXPECT_EQ(scale.shape, (std::vector<int64_t>{256, 4}));  // 256 rows, 512 columns in 4 groups
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(dir_ + "/int8/config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], kInt8QuantMethod);
  EXPECT_EQ(config["quantization_config"]["group_size"], 128);
  EXPECT_EQ(Checkpoint(dir_ + "/int8").total_elements(), Checkpoint(dir_ + "/f32").total_elements())
      << "scales are not weights";
}

TEST_F(Int8Checkpoint, EveryLayoutLoadsTheBytesQuantizingTheOriginalAtLoadHolds) {
  for (bool tied : {false, true}) {
    fs::remove_all(dir_);
    convert_both(tied);
    const Checkpoint original(dir_ + "/f32"), int8(dir_ + "/int8");
    for (const auto& [tp, pp] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {1, 2}, {2, 2}})
      for (int rank = 0; rank < tp * pp; ++rank) {
        const Topology t(tp * pp, rank, tp, pp, 2, {});
        const ModelWeights at_load = load_weights(original, t, DeviceContext{}, DType::kI8);
        const ModelWeights stored = load_weights(int8, t, DeviceContext{}, DType::kI8);
        const std::string what = std::string(tied ? "tied" : "untied") + " tp " +
                                 std::to_string(tp) + " pp " + std::to_string(pp) + " rank " +
                                 std::to_string(rank);
        expect_same_bytes(at_load, stored, what);
        EXPECT_LT(stored.bytes_read, at_load.bytes_read * 2 / 5)
            << what << ": the int8 file is read, not f32";
      }
  }
}

TEST_F(Int8Checkpoint, ShardFilesOfEitherSourceHoldTheSameBytes) {
  convert_both(/*tied=*/false);
  write_shards(ShardOptions{dir_ + "/f32", dir_ + "/from_f32", 2, 2, {}, /*int8=*/true});
  write_shards(ShardOptions{dir_ + "/int8", dir_ + "/from_int8", 2, 2, {}, /*int8=*/false});
  const Checkpoint original(dir_ + "/f32");
  for (int rank = 0; rank < 4; ++rank) {
    char name[64];
    std::snprintf(name, sizeof name, "/rank-%05d-of-00004.safetensors", rank);
    std::ifstream a(dir_ + "/from_f32" + name, std::ios::binary),
        b(dir_ + "/from_int8" + name, std::ios::binary);
    const std::string bytes_a((std::istreambuf_iterator<char>(a)), {}),
        bytes_b((std::istreambuf_iterator<char>(b)), {});
    EXPECT_EQ(bytes_a, bytes_b) << "rank " << rank;
    Checkpoint shard(dir_ + "/from_f32");
    const Topology t(4, rank, 2, 2, 2, {});
    shard.open_rank_shard(t);
    EXPECT_GT(shard.config().int8_group_size, 0) << "config.json says the shards are int8";
    expect_same_bytes(load_weights(original, t, DeviceContext{}, DType::kI8),
                      load_weights(shard, t, DeviceContext{}, DType::kI8),
                      "shard of rank " + std::to_string(rank));
  }
}

// The tensors of a safetensors file by name: dtype, shape and bytes.
std::map<std::string, RawTensor> tensors_of(const std::string& path) {
  SafetensorsFile f(path);
  std::map<std::string, RawTensor> out;
  for (const auto& [name, t] : f.tensors())
    out[name] = {name, t.shape, t.dtype,
                 std::vector<uint8_t>(f.data(t), f.data(t) + (t.end - t.begin))};
  return out;
}

void expect_same_tensors(const std::string& a, const std::string& b) {
  const auto ta = tensors_of(a), tb = tensors_of(b);
  ASSERT_EQ(ta.size(), tb.size()) << a << " and " << b;
  for (const auto& [name, t] : ta) {
    ASSERT_EQ(tb.count(name), 1u) << name << " is missing from " << b;
    const RawTensor& u = tb.at(name);
    EXPECT_EQ(t.dtype, u.dtype) << name;
    EXPECT_EQ(t.shape, u.shape) << name;
    EXPECT_TRUE(t.bytes == u.bytes) << name << ": other bytes";
  }
}

// `convert --from hf` writes, tensor by tensor, what `convert --from random` writes of the same
// model in each dtype; an int8 checkpoint converts to int8 as it is, and to f32 as q × scale.
TEST_F(Int8Checkpoint, ConvertingAnHfCheckpointWritesWhatConvertingItsSourceWrites) {
  for (bool tied : {false, true}) {
    fs::remove_all(dir_);
    convert_both(tied);
    write_random_model(aligned_config(tied), 11, ConvertOptions{dir_ + "/bf16", "", DType::kBF16});
    for (const auto& [dtype, name] :
         {std::pair{DType::kI8, "int8"}, std::pair{DType::kBF16, "bf16"}}) {
      convert_checkpoint(dir_ + "/f32", ConvertOptions{dir_ + "/hf_" + name, "", dtype});
      expect_same_tensors(dir_ + "/" + name + "/model.safetensors",
                          dir_ + "/hf_" + name + "/model.safetensors");
      const LlamaConfig c = Checkpoint(dir_ + "/hf_" + name).config();
      EXPECT_EQ(c.int8_group_size, dtype == DType::kI8 ? 128 : 0);
      EXPECT_EQ(c.tie_word_embeddings, tied);
    }
    convert_checkpoint(dir_ + "/int8", ConvertOptions{dir_ + "/int8_again", "", DType::kI8});
    expect_same_tensors(dir_ + "/int8/model.safetensors", dir_ + "/int8_again/model.safetensors");
    convert_checkpoint(dir_ + "/int8", ConvertOptions{dir_ + "/dequantized", "", DType::kF32});
    EXPECT_EQ(Checkpoint(dir_ + "/dequantized").config().int8_group_size, 0)
        << "no quantization_config is left";
    const Topology one = Topology::single(2);
    const ModelWeights q =
        load_weights(Checkpoint(dir_ + "/int8"), one, DeviceContext{}, DType::kF32);
    const ModelWeights f =
        load_weights(Checkpoint(dir_ + "/dequantized"), one, DeviceContext{}, DType::kF32);
    const auto mq = matrices(q), mf = matrices(f);
    ASSERT_EQ(mq.size(), mf.size());
    for (size_t i = 0; i < mq.size(); ++i)
      EXPECT_EQ(std::memcmp(mq[i]->data, mf[i]->data, mq[i]->nbytes), 0) << "matrix " << i;
  }
  EXPECT_NE(testing_util::error_of([&] {
              convert_checkpoint(dir_ + "/f32", ConvertOptions{dir_ + "/f32", "", DType::kI8});
            }).find("is the model directory itself"),
            std::string::npos);
}

TEST_F(Int8Checkpoint, HeldAsF32ItsMatricesAreQTimesScaleAndItsReadIsTheFileSize) {
  convert_both(/*tied=*/false);
  const Checkpoint int8(dir_ + "/int8");
  const Topology one = Topology::single(2);
  const ModelWeights q = load_weights(int8, one, DeviceContext{}, DType::kI8);
  const ModelWeights f = load_weights(int8, one, DeviceContext{}, DType::kF32);
  const auto mq = matrices(q), mf = matrices(f);
  ASSERT_EQ(mq.size(), mf.size());
  for (size_t i = 0; i < mq.size(); ++i) {
    ASSERT_EQ(mf[i]->dtype, DType::kF32);
    for (int64_t r = 0; r < mq[i]->rows; ++r)
      for (int64_t c = 0; c < mq[i]->cols; ++c)
        ASSERT_EQ(ops::weight_at(*mf[i], r, c), ops::weight_at(*mq[i], r, c))
            << "matrix " << i << " (" << r << ", " << c << ")";
  }
  // Closed form: every matrix's q (1 byte) and scales (4 bytes per 128 columns), the rest f32.
  const LlamaConfig c = aligned_config(false);
  auto matrix = [](uint64_t rows, uint64_t cols) {
    return rows * cols + rows * ((cols + 127) / 128) * 4;
  };
  const uint64_t d = 256, kv = 128, hid = 512, v = 301;
  const uint64_t per_layer =
      2 * matrix(d, d) + 2 * matrix(kv, d) + 2 * matrix(hid, d) + matrix(d, hid) + 2 * d * 4;
  const uint64_t expected = v * d * 4 + c.n_layers * per_layer + d * 4 + matrix(v, d);
  EXPECT_EQ(q.bytes_read, expected);
  EXPECT_EQ(f.bytes_read, expected);
}

// Held as f32, an int8 checkpoint splits like any other: with an FFN 320 wide, --tp 2 and 4 give
// slices of down_proj that start inside a group and cross into the next (rank 1 of 2: columns
// 160-319; of 4: 80-159), and o_proj's 64-column slices at --tp 4 are half groups. Each element is
// still its q × its group's scale: the one-rank value at the same place.
TEST_F(Int8Checkpoint, HeldAsF32ATpSplitThatCutsGroupsHoldsTheOneRankValues) {
  LlamaConfig c = aligned_config(false);
  c.hidden_dim = 320;
  write_random_model(c, 11, ConvertOptions{dir_ + "/int8", "", DType::kI8});
  const Checkpoint int8(dir_ + "/int8");
  const ModelWeights whole = load_weights(int8, Topology::single(2), DeviceContext{}, DType::kF32);
  for (int tp : {2, 4})
    for (int rank = 0; rank < tp; ++rank) {
      const Topology t(tp, rank, tp, 1, 2, {});
      const ModelWeights part = load_weights(int8, t, DeviceContext{}, DType::kF32);
      const int64_t ffn_first = balanced_split(c.hidden_dim, tp, rank).begin;
      for (size_t l = 0; l < 2; ++l)
        for (const auto& [mine, all, first] :
             {std::tuple{&part.layers[l].wo, &whole.layers[l].wo, int64_t{rank * c.q_dim() / tp}},
              std::tuple{&part.layers[l].w2, &whole.layers[l].w2, ffn_first}}) {
          ASSERT_EQ(mine->rows, all->rows);
          for (int64_t r = 0; r < mine->rows; r += 7)
            for (int64_t col = 0; col < mine->cols; ++col)
              ASSERT_EQ(ops::weight_at(*mine, r, col), ops::weight_at(*all, r, first + col))
                  << "tp " << tp << " rank " << rank << " layer " << l << " (" << r << ", " << col
                  << ")";
        }
    }
}

TEST_F(Int8Checkpoint, AnI8TensorWithoutQuantizationConfigIsRefused) {
  convert_both(false);
  edit_config([](nlohmann::json& j) { j.erase("quantization_config"); });
  const std::string err = load_error(dir_ + "/int8");
  EXPECT_NE(err.find("is I8, but"), std::string::npos) << err;
  EXPECT_NE(err.find("has no quantization_config"), std::string::npos) << err;
}

TEST_F(Int8Checkpoint, AnotherQuantMethodIsRefusedByName) {
  convert_both(false);
  edit_config([](nlohmann::json& j) {
    j["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  });
  const std::string err = load_error(dir_ + "/int8");
  EXPECT_NE(err.find("quantization_config.quant_method 'gptq' is not supported"), std::string::npos)
      << err;
}

TEST_F(Int8Checkpoint, AnotherGroupSizeIsRefused) {
  convert_both(false);
  edit_config([](nlohmann::json& j) { j["quantization_config"]["group_size"] = 64; });
  const std::string err = load_error(dir_ + "/int8");
  EXPECT_NE(
      err.find(
          "quantization_config.group_size is 64, but tpllama's int8 kernels use groups of 128"),
      std::string::npos)
      << err;
}

TEST_F(Int8Checkpoint, MissingOrMisshapenScalesAreRefusedByName) {
  convert_both(false);
  const std::string scale = "model.layers.1.self_attn.o_proj.weight_scale";
  rewrite([&](std::vector<RawTensor>& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [&](const RawTensor& x) { return x.name == scale; }),
            t.end());
  });
  std::string err = load_error(dir_ + "/int8");
  EXPECT_NE(err.find("int8 tensor 'model.layers.1.self_attn.o_proj.weight' has no scales: '" +
                     scale + "' is missing"),
            std::string::npos)
      << err;

  convert_both(false);
  rewrite([&](std::vector<RawTensor>& t) {
    for (RawTensor& x : t)
      if (x.name == scale) x.shape = {128, 4};  // same bytes, the wrong shape
  });
  err = load_error(dir_ + "/int8");
  EXPECT_NE(err.find("tensor '" + scale + "' has shape [128, 4] but config.json implies [256, 2]"),
            std::string::npos)
      << err;

  convert_both(false);
  rewrite([&](std::vector<RawTensor>& t) {
    for (RawTensor& x : t)
      if (x.name == scale) {
        x.dtype = DType::kBF16;
        x.bytes.resize(x.bytes.size() / 2);
      }
  });
  err = load_error(dir_ + "/int8");
  EXPECT_NE(err.find("'" + scale + "' has dtype BF16; int8 scales are F32"), std::string::npos)
      << err;
}

TEST_F(Int8Checkpoint, AnI8EmbeddingIsRefused) {
  convert_both(false);
  rewrite([](std::vector<RawTensor>& t) {
    for (RawTensor& x : t)
      if (x.name == "model.embed_tokens.weight") {
        x.dtype = DType::kI8;
        x.bytes.resize(x.bytes.size() / 4);
      }
  });
  const std::string err = load_error(dir_ + "/int8");
  EXPECT_NE(err.find("tensor 'model.embed_tokens.weight' is I8, but only weight matrices other "
                     "than the embedding"),
            std::string::npos)
      << err;
}

TEST_F(Int8Checkpoint, ANonFiniteWeightIsNotQuantizedIntoAShard) {
  const reference::Config c = testing_util::tiny_reference_config();
  reference::Weights w = reference::random_weights(c, 3);
  w.layers[1].w2[5 * 32 + 7] = std::numeric_limits<double>::infinity();
  reference::write_hf_model(dir_ + "/bad", c, &w, "F32");
  const std::string err = testing_util::error_of([&] {
    write_shards(ShardOptions{dir_ + "/bad", dir_ + "/shards", 1, 1, {}, /*int8=*/true});
  });
  EXPECT_NE(err.find("cannot quantize model.layers.1.mlp.down_proj.weight: element 167 (row 5, "
                     "column 7) is infinite"),
            std::string::npos)
      << "an Inf weight was quantized: " << err;
  EXPECT_FALSE(fs::exists(dir_ + "/shards/tpllama_shards.json")) << "no shard set is left behind";
}

TEST_F(Int8Checkpoint, AShardSplitThatCutsAGroupIsRefusedBeforeAnyWrite) {
  convert_both(false);
  const std::string err = testing_util::error_of([&] {
    write_shards(ShardOptions{dir_ + "/int8", dir_ + "/shards", 4, 1, {}, false});
  });
  EXPECT_NE(err.find("this int8 checkpoint quantizes model.layers.0.self_attn.o_proj.weight per "
                     "group of 128 of its "
                     "256 columns"),
            std::string::npos)
      << "tp 4 cuts 256 columns into 64: " << err;
  EXPECT_NE(err.find("or shard its f32, f16 or bf16 original"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir_ + "/shards")) << "nothing was written";
}

}  // namespace
}  // namespace tpllama
