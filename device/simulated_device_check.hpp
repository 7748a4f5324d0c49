#pragma once
// What simulated_device's two source files share: TP_CHECK for noexcept
// members, and the pointer helpers their messages and range tests use.
// Internal to device/; include it from nothing else.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

// For noexcept members: a broken precondition is a bug in the caller, and the
// simulator's job is to say so loudly rather than corrupt memory.
#define TP_CHECK(cond, ...)                                                                       \
  do {                                                                                            \
    if (!(cond)) ::tp::detail::check_failed(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)

namespace tp::detail {

[[noreturn]] inline void check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "tensorpager: check failed at %s:%d: %s\n  %s\n", file, line, cond, msg.c_str());
  std::abort();
}

inline const std::byte* as_bytes(const void* p) { return static_cast<const std::byte*>(p); }

inline std::string hex(const void* p) { return fmt::format("{}", p); }

}  // namespace tp::detail
