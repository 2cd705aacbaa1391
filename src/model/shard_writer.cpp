// Per-rank shard files: each holds exactly the bytes that rank's loader would copy out of the
// full checkpoint (source dtype kept, vocab padding included), under the Hugging Face names.
#include "model/shard_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_read.h"
#include "core/hash.h"
#include "core/json_text.h"
#include "core/log.h"
#include "model/checkpoint.h"
#include "model/safetensors_writer.h"
#include "model/shard_table.h"
#include "model/weights.h"
#include "ops/weight.h"

namespace tpllama {

namespace fs = std::filesystem;

namespace {

uint64_t fnv1a64_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path);
  Fnv1a h;
  std::vector<char> chunk(1 << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    h.add(chunk.data(), static_cast<size_t>(in.gcount()));
  }
  return h.value();
}

// The shape of a rank's slice of entry e, as its file holds it.
std::vector<int64_t> slice_shape(const ShardEntry& e) {
  const int64_t rows = e.split == Split::kRow ? e.rows : e.count;
  const int64_t cols = e.split == Split::kRow ? e.count : e.cols;
  return e.is_1d ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols};
}

RawTensor slice_of(const Checkpoint& ckpt, const ShardEntry& e) {
  const SafetensorsFile& file = ckpt.file_of(e.name);
  const TensorInfo& t = file.info(e.name);
  const size_t es = dtype_size(t.dtype);
  const uint8_t* src = file.data(t);
  RawTensor out;
  out.name = e.name;
  out.dtype = t.dtype;
  out.shape = slice_shape(e);
  const int64_t rows = out.shape[0], cols = e.is_1d ? 1 : out.shape[1];
  out.bytes.assign(static_cast<size_t>(rows * cols) * es, 0);  // zeros: vocab padding
  if (e.split == Split::kRow) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.bytes.data() + static_cast<size_t>(r * cols) * es,
                  src + static_cast<size_t>(r * e.cols + e.begin) * es,
                  static_cast<size_t>(cols) * es);
  } else {
    const int64_t present = std::clamp<int64_t>(e.rows - e.begin, 0, rows);
    std::memcpy(out.bytes.data(), src + static_cast<size_t>(e.begin * e.cols) * es,
                static_cast<size_t>(present * cols) * es);
  }
  return out;
}

// Whether entry e goes into a rank's file quantized from an f32 / f16 / bf16 checkpoint.
bool quantizes(const Checkpoint& ckpt, const ShardEntry& e, bool int8) {
  return int8 && stored_quantized(e) && ckpt.info(e.name).dtype != DType::kI8;
}

// The header entries of what append_slice writes for e, known before any byte is read.
void append_header(const Checkpoint& ckpt, const ShardEntry& e, bool int8,
                   std::vector<SafetensorsStreamWriter::Entry>& out) {
  const bool stored_int8 = ckpt.info(e.name).dtype == DType::kI8;
  if (!stored_int8 && !quantizes(ckpt, e, int8)) {
    out.push_back({e.name, ckpt.info(e.name).dtype, slice_shape(e)});
    return;
  }
  out.push_back({e.name, DType::kI8, slice_shape(e)});
  out.push_back({int8_scale_name(e.name), DType::kF32,
                 slice_shape(int8_scale_entry(e, ops::int8_group_size()))});
}

// The tensors of entry e in a rank's file: its slice as stored, with the scales of an int8 matrix,
// or quantized when an f32 / f16 / bf16 checkpoint is sharded as int8.
void append_slice(const Checkpoint& ckpt, const ShardEntry& e, bool int8,
                  std::vector<RawTensor>& out) {
  if (ckpt.info(e.name).dtype == DType::kI8) {
    out.push_back(slice_of(ckpt, e));
    out.push_back(slice_of(ckpt, int8_scale_entry(e, ops::int8_group_size())));
    return;
  }
  RawTensor t = slice_of(ckpt, e);
  if (!quantizes(ckpt, e, int8)) {
    out.push_back(std::move(t));
    return;
  }
  const int64_t rows = t.shape[0], cols = t.shape[1];
  std::vector<float> values(static_cast<size_t>(rows * cols));
  convert_to_f32(t.bytes.data(), t.dtype, values.size(), values.data());
  append_int8(out, t.name, rows, cols, values.data());
}

std::string rank_file_name(int rank, int world) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", rank, world);
  return name;
}

// Checks every tensor of every rank, before any file is written; returns the layers per stage.
std::vector<int> checked_stage_layers(const Checkpoint& ckpt, const ShardOptions& o, bool int8) {
  const LlamaConfig& c = ckpt.config();
  const int world = o.tp * o.pp;
  Topology layout(world, 0, o.tp, o.pp, c.n_layers, o.pp_layers);  // validates before any write
  for (int r = 0; r < o.tp; ++r) head_layout(c, o.tp, r);
  std::vector<int> stage_layers;
  for (int s = 0; s < o.pp; ++s) stage_layers.push_back(layout.stage_layers(s).count());
  for (int rank = 0; rank < world; ++rank) {
    const Topology t(world, rank, o.tp, o.pp, c.n_layers, stage_layers);
    check_checkpoint_tensors(ckpt, t);
    if (int8)  // an int8 shard holds whole groups
      check_int8_slices(c, t, c.int8_group_size > 0 ? "this int8 checkpoint" : "--dtype int8",
                        c.int8_group_size > 0 ? "shard its f32, f16 or bf16 original"
                                              : "shard with --dtype keep");
  }
  return stage_layers;
}

// The output is a new directory or an earlier shard set, whose rank files this one replaces; never
// the model itself nor another checkpoint (its weights would mix with the shards).
void prepare_out_dir(const ShardOptions& o) {
  if (fs::exists(o.out_dir)) {
    if (fs::equivalent(o.out_dir, o.model_dir))
      fail("--out ", o.out_dir, " is the model directory itself; shard into a new directory");
    if (!fs::is_directory(o.out_dir)) fail("--out ", o.out_dir, " exists and is not a directory");
    std::vector<fs::path> earlier_ranks;
    for (const auto& entry : fs::directory_iterator(o.out_dir)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() != ".safetensors") continue;
      if (name.rfind("rank-", 0) != 0 || name.find("-of-") == std::string::npos)
        fail("--out ", o.out_dir, " holds ", name,
             ", which is not a shard: shard into a new directory or an earlier one");
      earlier_ranks.push_back(entry.path());
    }
    if (fs::exists(o.out_dir + "/" + kShardManifestName))
      fs::remove(o.out_dir + "/" + kShardManifestName);
    for (const fs::path& p : earlier_ranks)
      fs::remove(p);  // another layout's files must not linger
  }
  fs::create_directories(o.out_dir);
}

// Rank t's file at `path`, tensor by tensor: a rank's file is never whole in memory (one of a 70B
// model at --tp 1 is 140 GB). Returns the file's size.
uint64_t write_rank_file(const Checkpoint& ckpt, const Topology& t, bool int8,
                         const std::string& path) {
  std::vector<ShardEntry> entries;
  std::set<std::string> written;
  for (const ShardEntry& e : build_shard_table(ckpt.config(), t))
    if (written.insert(e.name).second)
      entries.push_back(e);  // a tied head on a one-stage rank is the embedding
  std::vector<SafetensorsStreamWriter::Entry> header;
  for (const ShardEntry& e : entries) append_header(ckpt, e, int8, header);
  SafetensorsStreamWriter writer(path, header);
  uint64_t bytes = 0;
  for (const ShardEntry& e : entries) {
    std::vector<RawTensor> tensors;
    append_slice(ckpt, e, int8, tensors);
    for (const RawTensor& tensor : tensors) {
      writer.write(tensor);
      bytes += tensor.bytes.size();
    }
  }
  writer.finish();
  log::info("wrote " + fs::path(path).filename().string() + ": " + std::to_string(header.size()) +
            " tensors, " + std::to_string(bytes) + " bytes (tp rank " +
            std::to_string(t.tp_rank()) + ", pp rank " + std::to_string(t.pp_rank()) + ")");
  return fs::file_size(path);
}

// config.json as it is, with the quantization_config of int8 shards of a float checkpoint.
void write_shard_config(const ShardOptions& o, const LlamaConfig& c) {
  if (o.int8 && c.int8_group_size == 0) {
    const std::string config_path = o.model_dir + "/config.json";
    nlohmann::json config =
        parse_json(read_regular_file(config_path, "model config", kMaxSmallFileBytes), config_path);
    config["quantization_config"] =
        int8_quantization_json(static_cast<int>(ops::int8_group_size()));
    std::ofstream(o.out_dir + "/config.json") << config.dump(2) << '\n';
  } else {
    fs::copy_file(o.model_dir + "/config.json", o.out_dir + "/config.json",
                  fs::copy_options::overwrite_existing);
  }
}

// The manifest's record of the checkpoint's files: name, size and FNV-1a 64 of each.
nlohmann::json source_files(const std::string& model_dir) {
  nlohmann::json sources = nlohmann::json::array();
  for (const auto& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".safetensors") continue;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(fnv1a64_of_file(entry.path().string())));
    sources.push_back({{"name", name}, {"bytes", fs::file_size(entry.path())}, {"fnv1a64", hex}});
  }
  return sources;
}

}  // namespace

void write_shards(const ShardOptions& o) {
  Checkpoint ckpt(o.model_dir);
  if (ckpt.presharded())
    fail(o.model_dir, " is already a shard directory; shard the original checkpoint");
  const LlamaConfig& c = ckpt.config();
  const int world = o.tp * o.pp;
  const bool int8 = o.int8 || c.int8_group_size > 0;
  const std::vector<int> stage_layers = checked_stage_layers(ckpt, o, int8);
  prepare_out_dir(o);
  std::vector<std::string> files;
  std::vector<uint64_t> file_bytes;
  for (int rank = 0; rank < world; ++rank) {
    files.push_back(rank_file_name(rank, world));
    const Topology t(world, rank, o.tp, o.pp, c.n_layers, stage_layers);
    file_bytes.push_back(write_rank_file(ckpt, t, int8, o.out_dir + "/" + files.back()));
  }
  write_shard_config(o, c);
  copy_model_side_files(o.model_dir, o.out_dir);
  nlohmann::json manifest = {
      {"format", "tpllama-shards-1"},
      {"tp", o.tp},
      {"pp", o.pp},
      {"stage_layers", stage_layers},
      {"files", files},
      {"file_bytes", file_bytes},
      {"source",
       {{"dir", fs::absolute(o.model_dir).string()},
        {"elements", ckpt.total_elements()},
        {"files", source_files(o.model_dir)}}},
  };
  // The manifest goes last: a directory without it is not mistaken for a finished shard set.
  std::ofstream(o.out_dir + "/" + kShardManifestName) << manifest.dump(2) << '\n';
}

}  // namespace tpllama
