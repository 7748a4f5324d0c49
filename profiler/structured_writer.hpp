#pragma once
// tp::profiler::structured_writer: one interface for writing nested objects,
// arrays, strings and numbers, implemented for JSON (json_writer) and for
// Python's pickle (pickle_writer), so the saved form of a timeline (Note
// [Saved timeline]) is written once for both file types.

#include <cstdint>
#include <string_view>

namespace tp::profiler {

/// A streaming writer of nested values. Not thread-safe. Requires: calls
/// nest correctly (key() before each member of an object, end_* matching
/// begin_*); implementations throw tp::error on violations they detect.
class structured_writer {
 public:
  virtual ~structured_writer() = default;

  virtual void begin_object() = 0;
  virtual void end_object() = 0;
  virtual void begin_array() = 0;
  virtual void end_array() = 0;
  virtual void key(std::string_view k) = 0;
  virtual void value(std::string_view s) = 0;
  virtual void value(std::int64_t v) = 0;
  virtual void value(std::uint64_t v) = 0;
  virtual void value(double v) = 0;
  virtual void value(bool v) = 0;
  virtual void null() = 0;

  void value(const char* s) { value(std::string_view(s)); }
  void value(int v) { value(static_cast<std::int64_t>(v)); }
  void value(unsigned v) { value(static_cast<std::uint64_t>(v)); }

  /// A key and its value.
  template <class T>
  void member(std::string_view k, const T& v) {
    key(k);
    value(v);
  }
};

}  // namespace tp::profiler
