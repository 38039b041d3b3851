// The path-prefix test shared by the daemon and fencectl.
#include "common/path.h"

#include <gtest/gtest.h>

namespace fencefs::common {
namespace {

TEST(Under, APathIsUnderItself) {
  EXPECT_TRUE(under("/a", "/a"));
  EXPECT_TRUE(under("/", "/"));
}

TEST(Under, ComponentBoundariesOnly) {
  EXPECT_TRUE(under("/a/b", "/a"));
  EXPECT_TRUE(under("/a/b/c", "/a/b"));
  EXPECT_FALSE(under("/ab", "/a"));
  EXPECT_FALSE(under("/a", "/a/b"));
  EXPECT_FALSE(under("/b/a", "/a"));
}

TEST(Under, EveryAbsolutePathIsUnderRoot) {
  EXPECT_TRUE(under("/a", "/"));
  EXPECT_TRUE(under("/a/b", "/"));
  EXPECT_FALSE(under("", "/"));
  EXPECT_FALSE(under("a", "/"));
}

TEST(Under, RootIsUnderNothingElse) { EXPECT_FALSE(under("/", "/a")); }

}  // namespace
}  // namespace fencefs::common
