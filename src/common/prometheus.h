// Prometheus text exposition helpers shared by the metrics page.
#pragma once
#include <string>
#include <string_view>

namespace fencefs::common {

// `value` escaped for a label value (backslash, double quote, newline).
std::string prom_label_value(std::string_view value);

// Adds name="value" as the first label of every sample line of `text` whose first label is not
// of that name already (comments and blank lines are kept as they are), so that the pages of
// several mounts merge into one scrape (node_exporter's textfile collector) without clashes.
std::string prom_with_label(std::string_view text, std::string_view name, std::string_view value);

}  // namespace fencefs::common
