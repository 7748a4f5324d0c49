#include "profiler/json_writer.hpp"

#include <cmath>

#include <fmt/format.h>

#include "core/errors.hpp"

namespace tp::profiler {

std::string json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  char prev = 0;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '/':
        if (prev == '<') out += '\\';
        out += '/';
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += ch;  // UTF-8 passes through unchanged
        }
    }
    prev = ch;
  }
  out += '"';
  return out;
}

void json_writer::before_value() {
  if (open_.empty()) {
    if (top_written_) throw error("json_writer: a second top-level value");
    top_written_ = true;
    return;
  }
  if (open_.back() == '{') {
    if (!after_key_) throw error("json_writer: an object member without a key");
    after_key_ = false;
    return;
  }
  if (!first_.back()) out_ += ',';
  first_.back() = false;
}

void json_writer::begin_object() {
  before_value();
  out_ += '{';
  open_.push_back('{');
  first_.push_back(true);
}

void json_writer::end_object() {
  if (open_.empty() || open_.back() != '{' || after_key_) throw error("json_writer: unbalanced end_object");
  out_ += '}';
  open_.pop_back();
  first_.pop_back();
}

void json_writer::begin_array() {
  before_value();
  out_ += '[';
  open_.push_back('[');
  first_.push_back(true);
}

void json_writer::end_array() {
  if (open_.empty() || open_.back() != '[') throw error("json_writer: unbalanced end_array");
  out_ += ']';
  open_.pop_back();
  first_.pop_back();
}

void json_writer::key(std::string_view k) {
  if (open_.empty() || open_.back() != '{' || after_key_) throw error("json_writer: key outside an object");
  if (!first_.back()) out_ += ',';
  first_.back() = false;
  out_ += json_quote(k);
  out_ += ':';
  after_key_ = true;
}

void json_writer::value(std::string_view s) {
  before_value();
  out_ += json_quote(s);
}

void json_writer::value(std::int64_t v) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", v);
}

void json_writer::value(std::uint64_t v) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", v);
}

void json_writer::value(double v) {
  before_value();
  if (std::isfinite(v)) {
    fmt::format_to(std::back_inserter(out_), "{}", v);
  } else {
    out_ += "null";
  }
}

void json_writer::fixed(double v, int decimals) {
  before_value();
  if (std::isfinite(v)) {
    fmt::format_to(std::back_inserter(out_), "{:.{}f}", v, decimals);
  } else {
    out_ += "null";
  }
}

void json_writer::value(bool v) {
  before_value();
  out_ += v ? "true" : "false";
}

void json_writer::null() {
  before_value();
  out_ += "null";
}

}  // namespace tp::profiler
