// The path helpers shared by the daemon and fencectl.
#include "common/path.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

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

namespace fencefs::common {
namespace {

// Where a path's last component stands, not where a link there points.
TEST(WithCanonicalParent, ResolvesTheParentOnly) {
  char tmpl[] = "/tmp/fencefs-path-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string root = tmpl;
  char real[PATH_MAX];
  ASSERT_NE(realpath(root.c_str(), real), nullptr);
  ASSERT_EQ(mkdir((root + "/target").c_str(), 0700), 0);
  ASSERT_EQ(symlink((root + "/target").c_str(), (root + "/link").c_str()), 0);
  ASSERT_EQ(symlink(root.c_str(), (root + "/up").c_str()), 0);
  EXPECT_EQ(with_canonical_parent(root + "/link"), std::string(real) + "/link");
  EXPECT_EQ(with_canonical_parent(root + "/up/link/"), std::string(real) + "/link");
  EXPECT_EQ(with_canonical_parent(root + "/missing"), std::string(real) + "/missing");
  EXPECT_EQ(with_canonical_parent("/x"), "/x");
  EXPECT_FALSE(with_canonical_parent(root + "/."));
  EXPECT_FALSE(with_canonical_parent(root + "/.."));
  EXPECT_FALSE(with_canonical_parent(root + "/no/such/dir"));
  std::string rm = "rm -rf '" + root + "'";
  EXPECT_EQ(system(rm.c_str()), 0);
}

}  // namespace
}  // namespace fencefs::common
