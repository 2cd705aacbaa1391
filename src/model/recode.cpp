// Re-encoding a checkpoint: the shard table of one rank names every tensor, each read, converted
// and written before the next (SafetensorsStreamWriter), never the whole model in memory.
#include "model/recode.h"

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/json_text.h"
#include "model/checkpoint.h"
#include "model/safetensors_writer.h"
#include "model/shard_table.h"
#include "model/weights.h"
#include "ops/weight.h"

namespace tpllama {

namespace fs = std::filesystem;

namespace {

std::vector<int64_t> shape_of(const ShardEntry& e) {
  return e.is_1d ? std::vector<int64_t>{e.rows} : std::vector<int64_t>{e.rows, e.cols};
}

// The output's header: every matrix the table stores quantized as I8 plus its F32 scales when
// int8, every other tensor in `plain`.
std::vector<SafetensorsStreamWriter::Entry> recoded_header(const std::vector<ShardEntry>& tensors,
                                                           bool int8, DType plain) {
  std::vector<SafetensorsStreamWriter::Entry> header;
  for (const ShardEntry& e : tensors) {
    if (int8 && stored_quantized(e)) {
      header.push_back({e.name, DType::kI8, shape_of(e)});
      header.push_back(
          {int8_scale_name(e.name), DType::kF32, {e.rows, ops::int8_scale_cols(e.cols)}});
    } else {
      header.push_back({e.name, plain, shape_of(e)});
    }
  }
  return header;
}

// A tensor's values in f32: an int8 one as q × scale, as a run holding f32 computes it.
std::vector<float> f32_values(const Checkpoint& ckpt, const ShardEntry& e) {
  const TensorInfo& t = ckpt.info(e.name);
  const uint8_t* data = ckpt.file_of(e.name).data(t);
  const size_t n = static_cast<size_t>(e.rows * e.cols);
  std::vector<float> values(n);
  if (t.dtype == DType::kI8) {
    const auto* q = reinterpret_cast<const int8_t*>(data);
    const TensorInfo& s = ckpt.info(int8_scale_name(e.name));
    const auto* scales =
        reinterpret_cast<const float*>(ckpt.file_of(int8_scale_name(e.name)).data(s));
    const int64_t group = ops::int8_group_size();
    const int64_t groups = ops::int8_scale_cols(e.cols);
    for (int64_t r = 0; r < e.rows; ++r)
      for (int64_t col = 0; col < e.cols; ++col)
        values[static_cast<size_t>(r * e.cols + col)] =
            static_cast<float>(q[r * e.cols + col]) * scales[r * groups + col / group];
  } else {
    convert_to_f32(data, t.dtype, n, values.data());
  }
  return values;
}

// config.json as it is, saying how the weights are now held.
void write_recoded_config(const std::string& model_dir, const std::string& out_dir, bool int8,
                          DType plain) {
  const std::string config_path = model_dir + "/config.json";
  nlohmann::json config =
      parse_json(read_regular_file(config_path, "model config", kMaxSmallFileBytes), config_path);
  if (int8)
    config["quantization_config"] =
        int8_quantization_json(static_cast<int>(ops::int8_group_size()));
  else
    config.erase("quantization_config");
  config["torch_dtype"] = torch_dtype_name(plain);
  std::ofstream(out_dir + "/config.json") << config.dump(2) << '\n';
}

}  // namespace

LlamaConfig convert_checkpoint(const std::string& model_dir, const ConvertOptions& o) {
  Checkpoint ckpt(model_dir);
  if (ckpt.presharded())
    fail(model_dir, " is a shard directory: convert the checkpoint it was made from");
  if (fs::exists(o.out_dir) && fs::equivalent(o.out_dir, model_dir))
    fail("--out ", o.out_dir, " is the model directory itself: convert into a new directory");
  const LlamaConfig& c = ckpt.config();
  const Topology one = Topology::single(c.n_layers);
  check_checkpoint_tensors(ckpt, one);
  const bool int8 = o.dtype == DType::kI8;
  const DType plain = int8 ? DType::kF32 : o.dtype;  // what is not quantized

  std::vector<ShardEntry> tensors;
  std::set<std::string> seen;
  for (const ShardEntry& e : build_shard_table(c, one))
    if (seen.insert(e.name).second) tensors.push_back(e);  // a tied head is the embedding's tensor
  fs::create_directories(o.out_dir);
  SafetensorsStreamWriter writer(o.out_dir + "/model.safetensors",
                                 recoded_header(tensors, int8, plain));
  for (const ShardEntry& e : tensors) {
    const TensorInfo& t = ckpt.info(e.name);
    if (t.dtype == DType::kI8 && int8) {  // as stored
      const uint8_t* data = ckpt.file_of(e.name).data(t);
      const size_t n = static_cast<size_t>(e.rows * e.cols);
      const std::string scale = int8_scale_name(e.name);
      const TensorInfo& s = ckpt.info(scale);
      const uint8_t* scales = ckpt.file_of(scale).data(s);
      writer.write({e.name, shape_of(e), DType::kI8, std::vector<uint8_t>(data, data + n)});
      writer.write(
          {scale, s.shape, DType::kF32, std::vector<uint8_t>(scales, scales + (s.end - s.begin))});
      continue;
    }
    const std::vector<float> values = f32_values(ckpt, e);
    if (int8 && stored_quantized(e)) {
      std::vector<RawTensor> quantized;
      append_int8(quantized, e.name, e.rows, e.cols, values.data());
      for (const RawTensor& q : quantized) writer.write(q);
    } else {
      writer.write(encode_tensor({e.name, shape_of(e), values.data(), values.size()}, plain));
    }
  }
  writer.finish();
  write_recoded_config(model_dir, o.out_dir, int8, plain);
  copy_model_side_files(model_dir, o.out_dir);
  return c;
}

}  // namespace tpllama
