// Byte sizes as people write them ("300M", "6G", "1.5GiB", "123456") and as qeval prints them.
#pragma once

#include <cstdint>
#include <string>

namespace qeval {

// "300M" → 300·2^20. Suffixes K, M, G, T (optionally followed by B or iB, any case) are powers of
// 1024; a bare number is bytes. Throws naming `what` (the option) and the text when it is not a
// size of at least one byte.
std::int64_t parse_size(const std::string& text, const std::string& what);

// 1536 → "1.50 KiB", 6.4e9 → "5.96 GiB" (powers of 1024, three significant digits).
std::string format_bytes(std::int64_t bytes);

}  // namespace qeval
