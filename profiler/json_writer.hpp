#pragma once
// tp::profiler::json_writer: writes JSON text into a string, with the commas,
// escaping and number forms the format requires. Small on purpose: the
// exporters need only objects, arrays, strings and numbers, and the GPU
// machine builds with no network, so no JSON library is assumed.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/structured_writer.hpp"

namespace tp::profiler {

/// Appends JSON to a string. Not thread-safe; one writer per string.
class json_writer final : public structured_writer {
 public:
  explicit json_writer(std::string& out) : out_(out) {}

  using structured_writer::value;
  void begin_object() override;
  void end_object() override;
  void begin_array() override;
  void end_array() override;
  void key(std::string_view k) override;
  void value(std::string_view s) override;
  void value(std::int64_t v) override;
  void value(std::uint64_t v) override;
  /// Finite doubles in the shortest form that reads back exactly; NaN and
  /// infinities (not JSON) as null.
  void value(double v) override;
  void value(bool v) override;
  void null() override;
  /// A number with exactly `decimals` digits after the point (timestamps).
  void fixed(double v, int decimals);

 private:
  void before_value();

  std::string& out_;
  std::vector<char> open_;   // '{' or '['
  std::vector<bool> first_;  // no member written yet at that level
  bool after_key_ = false;
  bool top_written_ = false;
};

/// s as a JSON string literal, quotes included; "</" is written "<\/" so the
/// text is safe inside an HTML <script> element. Pure.
std::string json_quote(std::string_view s);

}  // namespace tp::profiler
