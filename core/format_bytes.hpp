#pragma once
// Human-readable byte counts for messages ("3.00 MiB"), binary units.

#include <cstddef>
#include <string>

#include <fmt/format.h>

namespace tp {

/// Formats a byte count with a binary unit: "512 B", "1.50 KiB", "3.00 GiB".
/// Pure and thread-safe.
inline std::string format_bytes(std::size_t bytes) {
  constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, units[unit]);
}

}  // namespace tp
