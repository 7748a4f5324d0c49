#pragma once
// tp::profiler::pickle_writer: writes Python pickle data (protocol 4) of
// dicts, lists, strings, ints, floats, bools and None.
//
// Note [Pickle opcodes]
// PyTorch's memory_viz page unpickles in JavaScript and knows a subset of the
// opcodes, so this writer uses only opcodes in that subset: PROTO, EMPTY_DICT,
// EMPTY_LIST, MARK, SETITEMS, APPENDS, SHORT_BINUNICODE, BINUNICODE, BININT1,
// BININT2, BININT, LONG1, BINFLOAT, NEWTRUE, NEWFALSE, NONE and STOP. No
// memo, no frames (both optional in protocol 4). tests/python checks the
// written opcodes against that list with pickletools.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/structured_writer.hpp"

namespace tp::profiler {

/// Appends one pickled value to a byte string: construct, write one value
/// (usually an object), then finish(). Not thread-safe.
class pickle_writer final : public structured_writer {
 public:
  /// Writes the protocol header.
  explicit pickle_writer(std::string& out);

  using structured_writer::value;
  void begin_object() override;
  void end_object() override;
  void begin_array() override;
  void end_array() override;
  void key(std::string_view k) override;
  void value(std::string_view s) override;
  void value(std::int64_t v) override;
  void value(std::uint64_t v) override;
  void value(double v) override;
  void value(bool v) override;
  void null() override;

  /// Writes STOP. Throws tp::error when a container is still open.
  void finish();

 private:
  void before_value();
  void write_string(std::string_view s);
  void op(unsigned char c) { out_ += static_cast<char>(c); }
  void little_endian(std::uint64_t v, int bytes);

  std::string& out_;
  std::vector<char> open_;  // '{' or '['
  bool after_key_ = false;
};

}  // namespace tp::profiler
