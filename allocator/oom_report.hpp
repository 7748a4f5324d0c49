#pragma once
// The out-of-memory message: the figures a person needs to act, in human
// units, and a hint. Modelled on PyTorch's message, which users know.

#include <cstddef>
#include <optional>
#include <string>

#include "device/device.hpp"

namespace tp {

/// What the allocator knew when it gave up.
struct oom_figures {
  std::size_t requested = 0;           // bytes asked for
  stream_id stream{};
  std::optional<std::size_t> budget;   // none: no budget
  std::size_t allocated = 0;
  std::size_t reserved = 0;
  std::size_t largest_free_block = 0;
  memory_info device{};
  std::string device_name;
  std::size_t reclaimed = 0;           // bytes the reclaimer freed this time
  bool has_reclaimer = false;          // a reclaimer (the budget runtime) is registered
  std::string reclaimer_account;       // reclaimer::describe(), may be empty
  bool larger_than_device = false;
  bool expandable_segments = false;    // Note [Expandable segments] in caching_allocator.hpp
  /// Expandable segments: the free bytes outside whole granules (which no
  /// unmap gives back), and the blocks in use beside them, by lifetime
  /// (Note [Long-lived placement] in caching_allocator.hpp).
  std::size_t stranded = 0;
  std::size_t stranded_beside_transient = 0;
  std::size_t stranded_beside_long_lived = 0;
};

/// Formats the message of a tp::out_of_memory. Pure.
std::string format_oom_message(const oom_figures& f);

}  // namespace tp
