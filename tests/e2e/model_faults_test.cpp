// Faults in the model a run is given, through the binary: a NaN weight, a final norm whose
// activations overflow, a config.json with fewer layers than the checkpoint, and --threads past
// the cores. Each is named in a message; none gives garbage with exit 0 or a crash.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

class ModelFaults : public StoriesSuite<ModelFaults> {
 public:
  static constexpr const char* kTag = "faults";

 protected:
  // A copy of the converted model in which `count` f32 values of `tensor` from element `first` on
  // are `value`.
  static std::string model_with(const std::string& name, const std::string& tensor, int64_t first,
                                int64_t count, float value) {
    const std::string dir = work_ + "/" + name;
    fs::remove_all(dir);
    fs::copy(model_, dir);
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_len = 0;
    f.read(reinterpret_cast<char*>(&header_len), 8);
    std::string header(header_len, ' ');
    f.read(header.data(), static_cast<std::streamsize>(header_len));
    const json info = json::parse(header).at(tensor);
    EXPECT_EQ(info.at("dtype"), "F32");
    const int64_t begin = info.at("data_offsets")[0].get<int64_t>();
    f.seekp(static_cast<std::streamoff>(8 + header_len + static_cast<uint64_t>(begin + first * 4)));
    for (int64_t i = 0; i < count; ++i) f.write(reinterpret_cast<const char*>(&value), 4);
    return dir;
  }

  static CommandResult run(const std::string& model, const std::string& out,
                           const std::string& flags = "") {
    const std::string in = work_ + "/prompts.txt";
    std::ofstream(in) << "Once upon a time\nThe little dog\n";
    return run_shell(binary() + " run --model " + model + " --input " + in + " --output " + out +
                     " --max-tokens 8 --log-interval 0" + flags);
  }
};

TEST_F(ModelFaults, NanWeightIsRefusedAtLoadNamingTheElement) {
  const std::string dir = model_with("nan", "model.layers.0.self_attn.q_proj.weight", 1234, 1,
                                     std::numeric_limits<float>::quiet_NaN());
  const std::string out = work_ + "/nan.jsonl";
  const CommandResult r = run(dir, out);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(
                "model.layers.0.self_attn.q_proj.weight element 1234 (row 19, column 18) is NaN"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(ModelFaults, OverflowingLogitsEndEachRequestWithAnErrorRecord) {
  // Finite weights (the load passes) whose product overflows: every logit row holds an Inf or NaN.
  const std::string dir = model_with("overflow", "model.norm.weight", 0, 64, 3e38f);
  const std::string out = work_ + "/overflow.jsonl";
  const CommandResult r = run(dir, out, " --temperature 0.8");
  EXPECT_EQ(r.exit_code, 65) << r.output;  // every request failed
  const std::vector<json> records = read_jsonl(out);
  ASSERT_EQ(records.size(), 2u) << r.output;
  for (const json& rec : records) {
    EXPECT_EQ(rec.value("finish_reason", ""), "error") << rec.dump();
    EXPECT_NE(
        rec.value("error", "")
            .find("the model's logits for this request are not finite (NaN or Inf) at position"),
        std::string::npos)
        << rec.dump();
  }
  // Three samples of each: the first fails before it forks the others, and is the whole record.
  const std::string samples_out = work_ + "/overflow_samples.jsonl";
  const CommandResult s = run(dir, samples_out, " --temperature 0.8 --n 3");
  EXPECT_EQ(s.exit_code, 65) << s.output;
  const std::vector<json> sampled = read_jsonl(samples_out);
  ASSERT_EQ(sampled.size(), 2u) << s.output;
  for (const json& rec : sampled)
    EXPECT_EQ(rec.value("error", "")
                  .rfind("sample 0: the model's logits for this request are not "
                         "finite",
                         0),
              0u)
        << rec.dump();
}

TEST_F(ModelFaults, ConfigWithFewerLayersThanTheCheckpointIsRefused) {
  const std::string dir = work_ + "/four_layers";
  fs::remove_all(dir);
  fs::copy(model_, dir);
  json config;
  std::ifstream(dir + "/config.json") >> config;
  config["num_hidden_layers"] = 4;  // stories260K has 5
  std::ofstream(dir + "/config.json") << config.dump();
  const CommandResult r = run(dir, work_ + "/four.jsonl");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(
      r.output.find("checkpoint has tensors config.json does not account for: model.layers.4.*"),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("internal check failed"), std::string::npos) << r.output;
}

TEST_F(ModelFaults, ThreadsPastTheCoresAreRefusedNotCrashed) {
  const CommandResult r = run(model_, work_ + "/threads.jsonl", " --threads 100000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--threads 100000 is more than the"), std::string::npos) << r.output;
}

}  // namespace
