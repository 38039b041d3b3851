// The domain table's places: resolved step by step by identity, followed when a directory at a
// step is replaced, and pinning every directory on the way to a domain root.
#include "fence/domain.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fencefs::fence {
namespace {

class DomainPlace : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fencefs-domain-XXXXXX";
    root_ = mkdtemp(tmpl);
    ASSERT_EQ(0, mkdir((root_ + "/a").c_str(), 0755));
    ASSERT_EQ(0, mkdir((root_ + "/a/b").c_str(), 0755));
    fd_ = open(root_.c_str(), O_PATH | O_DIRECTORY);
    ASSERT_GE(fd_, 0);
    struct stat st;
    ASSERT_EQ(0, fstat(fd_, &st));
    table_.add(0, "/", 0, st.st_dev, st.st_ino);
  }
  void TearDown() override {
    close(fd_);
    std::string cmd = "rm -rf '" + root_ + "'";
    EXPECT_EQ(0, std::system(cmd.c_str()));
  }
  struct stat at(const std::string& rel) {
    struct stat st {};
    EXPECT_EQ(0, lstat((root_ + rel).c_str(), &st));
    return st;
  }
  std::string root_;
  int fd_ = -1;
  DomainTable table_;
};

TEST_F(DomainPlace, ResolvesEveryStepByIdentity) {
  std::vector<PlaceStep> place;
  int fd = resolve_place(fd_, "/a/b", &place);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(2u, place.size());
  EXPECT_EQ("a", place[0].name);
  EXPECT_EQ(at("/a").st_ino, place[0].ino);
  EXPECT_EQ(at("/a/b").st_ino, place[1].ino);
  // Missing from a step on: identities 0, the names kept.
  EXPECT_EQ(-ENOENT, resolve_place(fd_, "/a/x/y", &place));
  ASSERT_EQ(3u, place.size());
  EXPECT_EQ(0u, place[1].ino);
  EXPECT_EQ("y", place[2].name);
  // Never through a symlink, never "." or "..".
  ASSERT_EQ(0, symlink("a", (root_ + "/l").c_str()));
  EXPECT_LT(resolve_place(fd_, "/l/b", &place), 0);
  EXPECT_EQ(-EINVAL, resolve_place(fd_, "/a/../a", &place));
  EXPECT_EQ(-EINVAL, resolve_place(fd_, "/a/./b", &place));
}

TEST_F(DomainPlace, PinsTheRootAndEveryDirectoryAboveIt) {
  std::vector<PlaceStep> place;
  close(resolve_place(fd_, "/a/b", &place));
  Domain* d = table_.add(1, "/a/b", 0, place);
  struct stat r = at(""), a = at("/a"), b = at("/a/b");
  EXPECT_EQ(d, table_.by_root_inode(b.st_dev, b.st_ino));
  EXPECT_TRUE(table_.on_place(a.st_dev, a.st_ino, "b", b.st_dev, b.st_ino));
  EXPECT_TRUE(table_.on_place(r.st_dev, r.st_ino, "a", a.st_dev, a.st_ino));
  EXPECT_TRUE(table_.on_place(a.st_dev, a.st_ino, "b", 0, 0));  // its place, even empty
  EXPECT_FALSE(table_.on_place(a.st_dev, a.st_ino, "c", 0, 0));
}

TEST_F(DomainPlace, AReplacedRootStaysTheDomain) {
  std::vector<PlaceStep> place;
  close(resolve_place(fd_, "/a/b", &place));
  Domain* d = table_.add(1, "/a/b", 0, place);
  struct stat a = at("/a");
  // Moved aside (so the new one cannot reuse its inode number), then made again.
  ASSERT_EQ(0, rename((root_ + "/a/b").c_str(), (root_ + "/a/c").c_str()));
  ASSERT_EQ(0, mkdir((root_ + "/a/b").c_str(), 0755));
  struct stat b2 = at("/a/b"), c = at("/a/c");
  uint64_t gen = table_.generation();
  EXPECT_TRUE(table_.follow(a.st_dev, a.st_ino, "c", c.st_dev, c.st_ino).empty());
  auto moved = table_.follow(a.st_dev, a.st_ino, "b", b2.st_dev, b2.st_ino);
  ASSERT_EQ(1u, moved.size());
  EXPECT_EQ(d, moved[0]);
  EXPECT_EQ(d, table_.by_root_inode(b2.st_dev, b2.st_ino));
  EXPECT_GT(table_.generation(), gen);
  EXPECT_TRUE(table_.follow(a.st_dev, a.st_ino, "b", b2.st_dev, b2.st_ino).empty());
}

}  // namespace
}  // namespace fencefs::fence
