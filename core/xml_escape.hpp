#pragma once
// Escaping text for HTML and SVG (XML) text and attribute values: the one
// copy the HTML page, its plot and the simulator's SVG figures share.

#include <string>
#include <string_view>

namespace tp {

/// text with &, <, >, " and ' escaped, so that it is safe in element text
/// and in attribute values quoted either way. Pure.
inline std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace tp
