// The named model shapes (LLaMA-family configs without weight files) that `bench --shape`,
// `convert --from random` and `plan --shape` take.
#pragma once

#include <string>

#include "model/config.h"

namespace tpllama {

// Named shapes for demos and benchmarks ("tiny", "110m", "llama2-7b", "llama3-8b", "llama2-70b",
// "mistral-7b", "qwen2.5-7b", "qwen3-8b", ...: shape_names() lists them).
// The known names, comma-separated (help texts and errors).
const char* shape_names();
LlamaConfig shape_config(const std::string& name);
// The same with vocab_size = vocab (when vocab > 0); BOS and EOS ids the smaller vocabulary no
// longer holds become LLaMA-2's, 1 and 2 (so llama3-8b's 128000/128001 still work at --vocab 512);
// a vocabulary below 3 ids is refused.
LlamaConfig shape_config(const std::string& name, int vocab);

}  // namespace tpllama
