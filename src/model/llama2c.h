// Import of llama2.c checkpoints (.bin, "version 0" float32 export) and seeded random-weight
// models, both written out as Hugging Face LLaMA directories.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace tpllama {

struct ConvertOptions {
  std::string out_dir;
  // Copied to out_dir/tokenizer.model; a tokenizer.json to out_dir/tokenizer.json, with the
  // tokenizer_config.json beside it when there is one.
  std::string tokenizer_path;
  DType dtype = DType::kF32;
};

// Reads a llama2.c checkpoint, permutes Wq/Wk from Meta's interleaved RoPE layout to HF
// rotate-half, records stop ids {2, 1} (TinyStories models end a story with BOS).
LlamaConfig convert_llama2c(const std::string& checkpoint_path, const ConvertOptions& options);

// A model with seeded random weights and the given config; vocab_size is taken from the
// tokenizer when the shape's vocabulary is larger than the tokenizer's.
void write_random_model(const LlamaConfig& config, uint64_t seed, const ConvertOptions& options);

// Refuses an --out that is not a directory or that holds another model's weights (safetensors
// other than the model.safetensors a convert writes, an index, a shard manifest), which would lie
// beside the new file and be read instead of it. A directory an earlier convert wrote is fine.
// The convert command calls it before converting; the writers above do not check again.
void check_convert_out(const std::string& out_dir);

}  // namespace tpllama
