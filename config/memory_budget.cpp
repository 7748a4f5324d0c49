#include "config/config.hpp"

#include <cmath>
#include <string>
#include <variant>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"
#include "config/parse_bytes.hpp"

// memory_budget (config.hpp): a budget as written, resolved against a device.

namespace tp {

std::size_t memory_budget::resolve(std::size_t total_bytes) const noexcept {
  if (const auto* bytes = std::get_if<std::size_t>(&value)) return *bytes;
  const double scaled = std::floor(std::get<double>(value) * static_cast<double>(total_bytes));
  if (!(scaled > 0)) return 0;
  if (scaled >= static_cast<double>(total_bytes)) return total_bytes;
  return static_cast<std::size_t>(scaled);
}

std::size_t memory_budget::resolve_for_device(std::size_t total_bytes, std::string_view device_name) const {
  const std::size_t bytes = resolve(total_bytes);
  const std::string shown = is_ratio() ? fmt::format("{} ({})", format_ratio_exact(std::get<double>(value)),
                                                     format_bytes(bytes))
                                       : format_bytes(bytes);
  if (bytes > total_bytes) {
    throw config_error(fmt::format("tensorpager: budget {} is more than the {} of {}; choose at most {} "
                                   "(or a ratio such as 0.9)",
                                   shown, format_bytes(total_bytes), device_name, format_bytes(total_bytes)));
  }
  if (bytes == 0) {
    throw config_error(fmt::format("tensorpager: budget {} is 0 bytes on {} ({}); choose a larger ratio or a size",
                                   shown, device_name, format_bytes(total_bytes)));
  }
  return bytes;
}

}  // namespace tp
