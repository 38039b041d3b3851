#include "common/prometheus.h"

#include <gtest/gtest.h>

namespace fencefs::common {
namespace {

TEST(Prometheus, EverySampleGetsTheLabelOnce) {
  const std::string in =
      "# HELP a_total A.\n# TYPE a_total counter\na_total 3\n"
      "b{domain=\"/x y\",result=\"ok\"} 1\nc{} 2\n"
      "fencefs_info{mount=\"/m\",pid=\"1\"} 1\n";
  EXPECT_EQ(
      "# HELP a_total A.\n# TYPE a_total counter\na_total{mount=\"/mnt/a \\\"q\\\"\"} 3\n"
      "b{mount=\"/mnt/a \\\"q\\\"\",domain=\"/x y\",result=\"ok\"} 1\n"
      "c{mount=\"/mnt/a \\\"q\\\"\"} 2\n"
      "fencefs_info{mount=\"/m\",pid=\"1\"} 1\n",
      prom_with_label(in, "mount", "/mnt/a \"q\""));
}

TEST(Prometheus, LabelValuesAreEscaped) {
  EXPECT_EQ("a\\\\b\\\"c\\nd", prom_label_value("a\\b\"c\nd"));
  EXPECT_EQ("/dåta ü", prom_label_value("/dåta ü"));
}

}  // namespace
}  // namespace fencefs::common
