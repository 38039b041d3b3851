// State files reached through their directory's descriptor, whatever its path comes to name.
#include "common/anchored.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <set>
#include <string>

namespace fencefs::common {
namespace {

std::string read_all(int fd) {
  std::string s;
  char buf[256];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
  return s;
}

void write_file(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  close(fd);
}

// One process-wide anchor: every case runs on the one directory, swapped for a link first.
TEST(Anchored, PathsInsideTheDirectoryFollowItsDescriptorNotItsName) {
  char tmpl[] = "/tmp/fencefs-anchored-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string root = tmpl, dir = root + "/state", moved = root + "/moved", other = root + "/other";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(other.c_str(), 0700), 0);
  write_file(dir + "/a", "mine");
  write_file(other + "/a", "theirs");
  anchor_dir(dir + "/", open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_EQ(rename(dir.c_str(), moved.c_str()), 0);
  ASSERT_EQ(symlink(other.c_str(), dir.c_str()), 0);

  int fd = anchored_open(dir + "/a", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(read_all(fd), "mine");
  close(fd);
  fd = anchored_open(dir + "/b.tmp", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(anchored_rename(dir + "/b.tmp", dir + "/b"), 0);
  EXPECT_EQ(access((moved + "/b").c_str(), F_OK), 0);
  EXPECT_NE(access((other + "/b").c_str(), F_OK), 0);
  EXPECT_EQ(anchored_mkdir(dir + "/d", 0700), 0);
  EXPECT_EQ(anchored_remove(dir + "/d"), 0);
  EXPECT_EQ(anchored_remove(dir + "/b"), 0);
  EXPECT_EQ(anchored_sync_dir(dir), 0);
  struct stat st;
  EXPECT_EQ(anchored_lstat(dir + "/a", &st), 0);
  EXPECT_EQ(st.st_size, 4);

  std::set<std::string> names;
  if (DIR* d = anchored_opendir(dir)) {
    while (dirent* e = readdir(d)) names.insert(e->d_name);
    closedir(d);
  }
  EXPECT_EQ(names, (std::set<std::string>{".", "..", "a"}));

  // A link as the last component inside it is not followed.
  ASSERT_EQ(symlink((other + "/a").c_str(), (moved + "/lnk").c_str()), 0);
  EXPECT_EQ(anchored_open(dir + "/lnk", O_WRONLY | O_TRUNC | O_CLOEXEC), -1);
  EXPECT_EQ(errno, ELOOP);

  // Every spelling of a path inside it is anchored, not only "DIR/NAME": "DIR//NAME" and
  // "DIR/./NAME" name the same file and must not reach it through the link.
  for (std::string spelled : {dir + "//a", dir + "/./a", dir + "/a/"}) {
    fd = anchored_open(spelled, O_RDONLY | O_CLOEXEC);
    if (spelled.back() == '/') {
      EXPECT_EQ(fd, -1) << spelled;  // a file named with a trailing slash
      continue;
    }
    ASSERT_GE(fd, 0) << spelled;
    EXPECT_EQ(read_all(fd), "mine") << spelled;
    close(fd);
  }
  fd = anchored_open(dir + "//c", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_EQ(access((moved + "/c").c_str(), F_OK), 0);
  EXPECT_NE(access((other + "/c").c_str(), F_OK), 0);
  EXPECT_EQ(anchored_unlink(dir + "/./c"), 0);
  EXPECT_NE(access((moved + "/c").c_str(), F_OK), 0);

  // A neighbour sharing the prefix is used as given; ".." is the checked directory's parent.
  write_file(root + "/stateful", "neighbour");
  fd = anchored_open(root + "/stateful", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(read_all(fd), "neighbour");
  close(fd);
  EXPECT_EQ(anchored_lstat(dir + "/../other/a", &st), 0);
  EXPECT_EQ(st.st_size, 6);

  std::string rm = "rm -rf '" + root + "'";
  EXPECT_EQ(system(rm.c_str()), 0);
}

}  // namespace
}  // namespace fencefs::common
