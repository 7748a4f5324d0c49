#include "profiler/pickle_writer.hpp"

#include <bit>
#include <cstring>

#include "core/errors.hpp"

namespace tp::profiler {
namespace {

// Note [Pickle opcodes].
constexpr unsigned char PROTO = 0x80, STOP = '.', MARK = '(', EMPTY_DICT = '}', EMPTY_LIST = ']',
                        SETITEMS = 'u', APPENDS = 'e', SHORT_BINUNICODE = 0x8c, BINUNICODE = 'X',
                        BININT1 = 'K', BININT2 = 'M', BININT = 'J', LONG1 = 0x8a, BINFLOAT = 'G',
                        NEWTRUE = 0x88, NEWFALSE = 0x89, NONE = 'N';

}  // namespace

pickle_writer::pickle_writer(std::string& out) : out_(out) {
  op(PROTO);
  op(4);
}

void pickle_writer::little_endian(std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out_ += static_cast<char>(static_cast<unsigned char>(v & 0xff));
    v >>= 8;
  }
}

void pickle_writer::before_value() {
  if (open_.empty()) return;
  if (open_.back() == '{') {
    if (!after_key_) throw error("pickle_writer: a dict member without a key");
    after_key_ = false;
  }
}

void pickle_writer::begin_object() {
  before_value();
  op(EMPTY_DICT);
  op(MARK);
  open_.push_back('{');
}

void pickle_writer::end_object() {
  if (open_.empty() || open_.back() != '{' || after_key_) throw error("pickle_writer: unbalanced end_object");
  op(SETITEMS);
  open_.pop_back();
}

void pickle_writer::begin_array() {
  before_value();
  op(EMPTY_LIST);
  op(MARK);
  open_.push_back('[');
}

void pickle_writer::end_array() {
  if (open_.empty() || open_.back() != '[') throw error("pickle_writer: unbalanced end_array");
  op(APPENDS);
  open_.pop_back();
}

void pickle_writer::key(std::string_view k) {
  if (open_.empty() || open_.back() != '{' || after_key_) throw error("pickle_writer: key outside a dict");
  write_string(k);  // SETITEMS pairs keys and values up
  after_key_ = true;
}

void pickle_writer::value(std::string_view s) {
  before_value();
  write_string(s);
}

void pickle_writer::write_string(std::string_view s) {
  if (s.size() < 256) {
    op(SHORT_BINUNICODE);
    op(static_cast<unsigned char>(s.size()));
  } else {
    if (s.size() > UINT32_MAX) throw error("pickle_writer: a string longer than 4 GiB");
    op(BINUNICODE);
    little_endian(s.size(), 4);
  }
  out_.append(s.data(), s.size());
}

void pickle_writer::value(std::int64_t v) {
  before_value();
  if (v >= 0 && v < 256) {
    op(BININT1);
    op(static_cast<unsigned char>(v));
  } else if (v >= 0 && v < 65536) {
    op(BININT2);
    little_endian(static_cast<std::uint64_t>(v), 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op(BININT);
    little_endian(static_cast<std::uint64_t>(static_cast<std::uint32_t>(static_cast<std::int32_t>(v))), 4);
  } else {
    op(LONG1);
    op(8);
    little_endian(static_cast<std::uint64_t>(v), 8);  // two's complement, as LONG1 reads it
  }
}

void pickle_writer::value(std::uint64_t v) {
  if (v <= static_cast<std::uint64_t>(INT64_MAX)) {
    value(static_cast<std::int64_t>(v));
    return;
  }
  before_value();
  op(LONG1);
  op(9);  // a ninth, zero byte keeps the sign positive
  little_endian(v, 8);
  op(0);
}

void pickle_writer::value(double v) {
  before_value();
  op(BINFLOAT);
  const auto bits = std::bit_cast<std::uint64_t>(v);
  for (int i = 7; i >= 0; --i) out_ += static_cast<char>(static_cast<unsigned char>((bits >> (8 * i)) & 0xff));
}

void pickle_writer::value(bool v) {
  before_value();
  op(v ? NEWTRUE : NEWFALSE);
}

void pickle_writer::null() {
  before_value();
  op(NONE);
}

void pickle_writer::finish() {
  if (!open_.empty()) throw error("pickle_writer: finish() with a container still open");
  op(STOP);
}

}  // namespace tp::profiler
