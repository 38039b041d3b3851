// Thread-safe errno text.
#include "common/error.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <thread>
#include <vector>

namespace fencefs::common {
namespace {

TEST(Errstr, NamesTheError) {
  EXPECT_EQ("No such file or directory", errstr(ENOENT));
  EXPECT_EQ("Stale file handle", errstr(ESTALE));
  EXPECT_NE(std::string::npos, errstr(99999).find("99999"));  // unknown: still says which
}

TEST(Errstr, ConcurrentCallersEachGetTheirOwnText) {
  // Unknown errnos are formatted into a buffer: with strerror(3) it is shared between threads.
  std::vector<std::thread> threads;
  std::vector<char> ok(4, 1);
  for (int t = 0; t < 4; t++) {
    threads.emplace_back([t, &ok] {
      const int e = 100000 + t;
      for (int i = 0; i < 20000; i++) {
        if (errstr(e).find(std::to_string(e)) == std::string::npos) ok[t] = 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; t++) EXPECT_TRUE(ok[t]) << t;
}

}  // namespace
}  // namespace fencefs::common
