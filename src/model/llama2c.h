// Import of llama.c checkpoints (.bin, "version 0" float32 export) and seeded random-weight
// models, both written out as Hugging Face LLaMA directories.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "model/config.h"

namespace tpllama {

struct ConvertOptions {
  std::string out_dir;
  std::string tokenizer_path;  // copied to out_dir/tokenizer.model
  DType dtype = DType::kF32;
};

// Reads a llama2.c checkpoint, permutes Wq/Wk from Meta's interleaved RoPE layout to HF
// rotate-half, records stop ids {2, 1} (TinyStories models end a story with BOS).
LlamaConfig convert_llama2c(const std::string& checkpoint_path, const ConvertOptions& options);

// Named shapes for demos and benchmarks ("tiny", "110m", "llama2-7b", "llama3-8b", "llama2-70b").
LlamaConfig shape_config(const std::string& name);
// The same with vocab_size = vocab (when vocab > 0); BOS and EOS ids the smaller vocabulary no longer
// holds become LLaMA-2's, 1 and 2 (so llama3-8b's 128000/128001 still work at --vocab 512); a
// vocabulary below 3 ids is refused.
LlamaConfig shape_config(const std::string& name, int vocab);

// A model with seeded random weights and the given config; vocab_size is taken from the
// tokenizer when the shape's vocabulary is larger than the tokenizer's.
void write_random_model(const LlamaConfig& config, uint64_t seed, const ConvertOptions& options);

// Refuses an --out that is not a directory or that holds another model's weights (safetensors
// other than the model.safetensors a convert writes, an index, a shard manifest), which would lie
// beside the new file and be read instead of it. A directory an earlier convert wrote is fine.
// The convert command calls it before converting; the writers above do not check again.
void check_convert_out(const std::string& out_dir);

}  // namespace tpllama
