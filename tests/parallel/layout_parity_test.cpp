// Final-position logits of every TP x PP layout that fits the world size, computed by the sharded
// model across ranks (candidate), against the single-rank model on the same rank (reference).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "model/llama2c.h"
#include "model/llama_model.h"
#include "parallel/mpi_comm.h"
#include "parallel/self_comm.h"
#include "shipped_models.h"
#include "temp_files.h"

namespace tpllama {
namespace {

struct Layout {
  int tp;
  int pp;
  std::vector<int> pp_layers;
};

using shipped::stories_dir;

// Rank 0 converts stories260K once into a directory every rank (one node) can read.
std::string converted_model() {
  static std::string dir;
  if (!dir.empty()) return dir;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  long long pid = rank == 0 ? static_cast<long long>(::getpid()) : 0;
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  dir = (std::filesystem::temp_directory_path() / ("tpllama_mpi_" + std::to_string(pid))).string();
  if (rank == 0) {
    // Both models go when rank 0 exits: after main's last collective, every rank is done with them.
    test_files::remove_at_exit(dir);
    test_files::remove_at_exit(dir + "_wide");
    const std::string s = stories_dir();
    convert_llama2c(s + "/stories260K.bin", ConvertOptions{dir, s + "/tok512.model", DType::kF32});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

// A random model wide enough for TP int8 layouts (o_proj's and down_proj's 512 columns split into
// whole 128-column groups at tp 2 and 4), with stories260K's 5 layers so that every layout fits,
// written once by rank 0 beside the converted one.
std::string aligned_model() {
  static std::string dir;
  if (!dir.empty()) return dir;
  dir = converted_model() + "_wide";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    LlamaConfig c;
    c.dim = 512;
    c.hidden_dim = 512;
    c.n_layers = 5;
    c.n_heads = 8;
    c.n_kv_heads = 4;
    c.head_dim = 64;
    c.vocab_size = 512;
    c.max_seq_len = 256;
    c.rms_norm_eps = 1e-5;
    write_random_model(c, 7, ConvertOptions{dir, "", DType::kF32});
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

std::vector<int> reference_tokens(size_t n) {
  std::ifstream in(stories_dir() + "/reference_greedy.jsonl");
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line);
  std::vector<int> t = j["prompt_tokens"].get<std::vector<int>>();
  for (int x : j["generated_tokens"]) t.push_back(x);
  t.resize(n);
  return t;
}

StepBatch prefill(const std::vector<int>& tokens) {
  StepBatch b;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.tokens.push_back(tokens[i]);
    b.positions.push_back(static_cast<int>(i));
    b.slots.push_back(0);
  }
  b.logit_rows = {static_cast<int>(tokens.size()) - 1, static_cast<int>(tokens.size()) / 2};
  return b;
}

// The layout's final logits on the last stage's ranks, candidate held as `dtype`, against the
// single-rank model held as `reference_dtype` on the same rank: the largest difference (-1 on ranks
// of other stages, which only pass their hidden states on).
double worst_logit_difference(const Layout& layout, DType dtype, DType reference_dtype,
                              const std::string& model = converted_model()) {
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(layout.tp * layout.pp, world) << "only this world's layouts are instantiated";
  const std::string& dir = model;
  const std::vector<int> tokens = reference_tokens(40);
  const StepBatch batch = prefill(tokens);

  Checkpoint ckpt(dir);
  Topology topology(world, rank, layout.tp, layout.pp, ckpt.config().n_layers, layout.pp_layers);
  auto tp_comm = MpiCommunicator::split(MPI_COMM_WORLD, topology.pp_rank(), topology.tp_rank());
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MpiCommunicator pp_comm(dup);
  LlamaModel candidate(ckpt, topology, *tp_comm, DeviceContext{}, ModelLimits{64, 64}, dtype);
  EXPECT_EQ(candidate.n_layers_local(), topology.my_layers().count())
      << "the candidate holds only its stage";
  KvCache cache(candidate.n_layers_local(), candidate.kv_dim_local(), 16, 4, 1);
  for (int b : {2, 0, 3}) cache.append_block(0, b);

  if (!topology.is_first_stage()) {
    std::vector<uint8_t> bytes = pp_comm.recv_bytes(rank - layout.tp, 1);
    Tensor in = candidate.input_hidden(static_cast<int64_t>(tokens.size()));
    EXPECT_EQ(bytes.size(), in.nbytes());
    std::memcpy(in.data(), bytes.data(), std::min(bytes.size(), in.nbytes()));
  }
  Tensor out = candidate.forward(batch, cache);
  if (!topology.is_last_stage()) {
    const auto* p = static_cast<const uint8_t*>(out.data());
    pp_comm.send_bytes_async(std::vector<uint8_t>(p, p + out.nbytes()), rank + layout.tp, 1);
    pp_comm.wait_sends();
    return -1;
  }
  // Whole rows from the vocab shards of the TP group.
  const int64_t rows = out.size(0), v_local = out.size(1);
  std::vector<float> gathered(static_cast<size_t>(layout.tp * rows * v_local));
  tp_comm->all_gather(out, Tensor(gathered.data(), DType::kF32, {layout.tp * rows, v_local}));

  SelfCommunicator self;
  Checkpoint ref_ckpt(dir);
  LlamaModel reference(ref_ckpt, Topology::single(ref_ckpt.config().n_layers), self,
                       DeviceContext{}, ModelLimits{64, 64}, reference_dtype);
  KvCache ref_cache(reference.n_layers_local(), reference.kv_dim_local(), 16, 4, 1);
  for (int b : {0, 1, 2}) ref_cache.append_block(0, b);
  Tensor expected = reference.forward(batch, ref_cache);
  const int vocab = ckpt.config().vocab_size;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int v = 0; v < vocab; ++v) {
      const float got =
          gathered[static_cast<size_t>((v / v_local * rows + r) * v_local + v % v_local)];
      worst =
          std::max(worst, static_cast<double>(std::abs(got - expected.as<float>()[r * vocab + v])));
    }
  return worst;
}

class LayoutParity : public ::testing::TestWithParam<Layout> {};

TEST_P(LayoutParity, LogitsMatchSingleRank) {
  if (stories_dir().empty()) GTEST_FAIL() << ::tpllama::shipped::kStoriesMissing;
  const Layout layout = GetParam();
  const double worst = worst_logit_difference(layout, DType::kF32, DType::kF32);
  if (worst < 0) return;
  // Tolerance: two fp32 summation orders of the same dot products. The issue asked for 1e-5; at
  // |logit| ~ 12 (stories260K's byte tokens) one float ulp is 9.5e-7, and splitting the FFN's
  // 172-term reductions in two (tp 2) moves the logits by up to 13 ulp (1.24e-5, measured). For
  // scale: the single-rank path differs from run.c's own fp32 logits by 1.6e-5.
  EXPECT_LT(worst, 2e-5) << "tp " << layout.tp << " pp " << layout.pp;
  std::printf("tp %d pp %d: max |candidate - reference| logit difference %.3g\n", layout.tp,
              layout.pp, worst);
}

// int8 weights: a layout gives one rank's int8 logits (the groups are the whole matrix's, so every
// layout holds the same numbers), and how far int8 moves the logits from f32 is reported. Pipeline
// layouts on stories260K; TP layouts on a random model 512 wide with 5 layers (stories260K's
// 64-wide matrices cannot split into whole 128-column groups).
class Int8LayoutParity : public ::testing::TestWithParam<Layout> {};

TEST_P(Int8LayoutParity, LogitsMatchSingleRankInt8) {
  if (stories_dir().empty()) GTEST_FAIL() << ::tpllama::shipped::kStoriesMissing;
  const Layout layout = GetParam();
  const std::string model = layout.tp > 1 ? aligned_model() : converted_model();
  const double same = worst_logit_difference(layout, DType::kI8, DType::kI8, model);
  const double from_f32 = worst_logit_difference(layout, DType::kI8, DType::kF32, model);
  if (same < 0) return;
  // Pipeline layouts compute what one rank does (same = 0). A TP split adds each rank's partial
  // sums of o_proj and down_proj in another order, a few f32 ulps as for f32; but where prefill
  // quantizes those activations for the VNNI kernels, an ulp across a rounding boundary moves a
  // value by a whole quantization step, and that spreads through the layers. Measured on the
  // 512-wide model: tp 2 4.2e-7, tp 2 x pp 2 4.2e-7, tp 4 1.0e-2 (against 1.4e-2 from f32). So a
  // TP layout must stay closer to one rank's int8 than int8 is to f32 (a wrong slice of weights or
  // scales moves logits by whole units); the CLI test asks its greedy texts to be one rank's.
  if (layout.tp == 1)
    EXPECT_LT(same, 2e-5) << "tp " << layout.tp << " pp " << layout.pp;
  else
    EXPECT_LT(same, from_f32) << "tp " << layout.tp << " pp " << layout.pp;
  std::printf(
      "int8 tp %d pp %d (%s): max logit difference %.3g from one rank's int8, %.3g from one rank's "
      "f32\n",
      layout.tp, layout.pp, layout.tp > 1 ? "random 512-wide model" : "stories260K", same,
      from_f32);
}

// The layouts of this job's world size (2, 4, 5 or 8 ranks: tests/CMakeLists.txt), so that no case
// is instantiated only to be skipped. MPI is initialised before the tests are registered.
std::vector<Layout> layouts_of_this_world() {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::vector<Layout> layouts;
  for (const Layout& l :
       {Layout{2, 1, {}}, Layout{1, 2, {}}, Layout{4, 1, {}}, Layout{2, 2, {}},
        Layout{2, 2, {1, 4}}, Layout{1, 4, {}}, Layout{8, 1, {}}, Layout{1, 5, {}}})
    if (l.tp * l.pp == world) layouts.push_back(l);
  return layouts;
}

// "tp2_pp2_1_4": the layout, and its layers per stage when given.
std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  std::ostringstream name;
  name << "tp" << info.param.tp << "_pp" << info.param.pp;
  for (int n : info.param.pp_layers) name << "_" << n;
  return name.str();
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayoutParity, ::testing::ValuesIn(layouts_of_this_world()),
                         layout_name);

// Filtered out at 5 and 8 ranks (tests/CMakeLists.txt): the 2- and 4-rank layouts.
INSTANTIATE_TEST_SUITE_P(Int8Layouts, Int8LayoutParity,
                         ::testing::ValuesIn(layouts_of_this_world()), layout_name);

}  // namespace
}  // namespace tpllama
