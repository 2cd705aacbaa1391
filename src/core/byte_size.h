// Sizes in bytes as people write and read them: "8GiB" in, "512.00 MiB" out.
#pragma once

#include <cstdint>
#include <string>

namespace tpllama {

// "8GiB", "512MiB", "1.5GB", "4096" → bytes; throws naming the text.
uint64_t parse_byte_size(const std::string& text);

// "123.45 MiB".
std::string mib(double bytes);

// A limit as people write it: "64 MiB", "1 GiB", "16 KiB" when a whole number of those, else
// "1000 bytes".
std::string byte_limit_text(uint64_t bytes);

}  // namespace tpllama
