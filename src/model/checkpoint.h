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

namespace tpllama {

class Checkpoint {
 public:
  // Opens and validates every file's header; throws naming the directory and the file.
  explicit Checkpoint(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const LlamaConfig& config() const { return config_; }
  std::string tokenizer_path() const { return dir_ + "/tokenizer.model"; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // The file holding a tensor and its header entry; throws naming the tensor and directory.
  const SafetensorsFile& file_of(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const { return file_of(name).info(name); }
  uint64_t total_tensor_bytes() const;
  uint64_t total_elements() const;

 private:
  void open_index(const std::string& index_path);

  std::string dir_;
  LlamaConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

// HF tensor names.
std::string layer_tensor_name(int layer, const std::string& suffix);

}  // namespace tpllama
