// `tpllama convert --from hf`: a Hugging Face checkpoint written again in another dtype (f32, bf16,
// f16, or an int8 checkpoint), one tensor at a time, so that a checkpoint larger than memory can be
// converted; the tokenizer files and config.json go with it.
#pragma once

#include <string>

#include "model/config.h"
#include "model/llama2c.h"

namespace tpllama {

// Reads model_dir (not a shard directory) and writes options.out_dir/model.safetensors with every
// tensor of the model in options.dtype: int8 quantizes every matrix but the embedding (an int8
// source's q and scales are copied as they are), float outputs of an int8 source hold q × scale.
// The tokenizer is the model's own (options.tokenizer_path is not used). Returns the config.
LlamaConfig convert_checkpoint(const std::string& model_dir, const ConvertOptions& options);

}  // namespace tpllama
