// A Hugging Face LLaMA model directory: config.json, model.safetensors or sharded
// model-0000X-of-0000Y.safetensors with model.safetensors.index.json, tokenizer.model.
// Files are memory-mapped; a rank reads only the bytes of the slices it copies.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/safetensors.h"
#include "parallel/topology.h"

namespace tpllama {

// What `tpllama shard` records next to the per-rank files it writes.
struct ShardManifest {
  int tp = 0;
  int pp = 0;
  std::vector<int> stage_layers;     // layers per stage
  std::vector<std::string> files;    // per world rank
  std::vector<uint64_t> file_bytes;  // their sizes when written (a stale or cut file is refused)
  uint64_t source_elements = 0;      // elements of the checkpoint it was made from
};

inline constexpr const char* kShardManifestName = "tpllama_shards.json";

class Checkpoint {
 public:
  // Opens and validates every file's header; throws naming the directory and the file. A shard
  // directory (made by `tpllama shard`) opens no weight file until open_rank_shard().
  explicit Checkpoint(const std::string& dir);

  bool presharded() const { return !manifest_.files.empty(); }
  const ShardManifest& manifest() const { return manifest_; }
  // Shard directories only: refuses a layout other than the one the directory was made for, then
  // maps this rank's file.
  void open_rank_shard(const Topology& topology);

  const std::string& dir() const { return dir_; }
  const LlamaConfig& config() const { return config_; }
  std::string tokenizer_path() const { return dir_ + "/tokenizer.model"; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // The file holding a tensor and its header entry; throws naming the tensor and directory.
  const SafetensorsFile& file_of(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const { return file_of(name).info(name); }
  // The scales of an int8 matrix (`<name>_scale` beside an I8 `<name>`): not weights of their own.
  bool is_int8_scale(const std::string& name) const;
  uint64_t total_elements() const;  // of the weights (scales not counted)

 private:
  void open_index(const std::string& index_path);
  void read_manifest(const std::string& path);

  std::string dir_;
  LlamaConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
  ShardManifest manifest_;
};

// The files that travel with a tokenizer: its configuration (BOS, chat template), the stop ids of
// generation_config.json, the chat template file and the special tokens' map.
const std::vector<std::string>& tokenizer_companion_files();

// The files beside the weights a run reads: the tokenizer (tokenizer.model or tokenizer.json) and
// its companion files.
const std::vector<std::string>& model_side_files();

// Copies the files beside the weights a run reads (tokenizer.model or tokenizer.json,
// tokenizer_config.json, generation_config.json, chat_template.jinja, special_tokens_map.json) that
// from_dir has, into to_dir; config.json is the caller's.
void copy_model_side_files(const std::string& from_dir, const std::string& to_dir);

// HF tensor names.
std::string layer_tensor_name(int layer, const std::string& suffix);

}  // namespace tpllama
