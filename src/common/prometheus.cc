#include "common/prometheus.h"

namespace fencefs::common {

std::string prom_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

std::string prom_with_label(std::string_view text, std::string_view name, std::string_view value) {
  const std::string label = std::string(name) + "=\"" + prom_label_value(value) + "\"";
  const std::string present = std::string(name) + "=\"";
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  while (!text.empty()) {
    size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol == std::string_view::npos ? text.size() : eol + 1);
    text.remove_prefix(line.size());
    if (line.empty() || line[0] == '#' || line[0] == '\n') {
      out += line;
      continue;
    }
    // The metric name ends at '{' or at the space before the value.
    size_t end = line.find_first_of("{ ");
    if (end == std::string_view::npos) {
      out += line;
      continue;
    }
    if (line[end] == ' ') {
      out.append(line.substr(0, end)).append("{").append(label).append("}");
      out += line.substr(end);
      continue;
    }
    // Only a first label is recognised: a later one could hide inside another label's value.
    if (line.substr(end + 1).rfind(present, 0) == 0) {
      out += line;
      continue;
    }
    out.append(line.substr(0, end + 1)).append(label);
    if (line[end + 1] != '}') out += ',';
    out += line.substr(end + 1);
  }
  return out;
}

}  // namespace fencefs::common
