// The memory open .fencefs files may hold: per user, and for all users but root together.
#include <gtest/gtest.h>

#include <cerrno>

#include "fs/fd_budget.h"

namespace fencefs::fs {
namespace {

constexpr size_t kMin = PageBudget::kMinCharge;

TEST(PageBudget, EachOpenIsChargedAtLeastTheMinimum) {
  PageBudget b(4 * kMin, 100 * kMin);
  size_t c = 0;
  EXPECT_EQ(0, b.take(1000, 10, &c));
  EXPECT_EQ(kMin, c);
  EXPECT_EQ(0, b.take(1000, 2 * kMin + 1, &c));
  EXPECT_EQ(2 * kMin + 1, c);
  size_t refused = 7;
  EXPECT_EQ(EMFILE, b.take(1000, 1, &refused));  // 4 * kMin would be exceeded by one byte
  EXPECT_EQ(0u, refused);                        // nothing to give back
  b.give(1000, c);
  EXPECT_EQ(0, b.take(1000, 2 * kMin, &c));
}

TEST(PageBudget, OneUsersShareLeavesTheOthersTheirs) {
  PageBudget b(2 * kMin, 3 * kMin);
  size_t c[5] = {};
  EXPECT_EQ(0, b.take(1000, 0, &c[0]));
  EXPECT_EQ(0, b.take(1000, 0, &c[1]));
  EXPECT_EQ(EMFILE, b.take(1000, 0, &c[2]));
  EXPECT_EQ(0, b.take(1001, 0, &c[2]));
  EXPECT_EQ(ENFILE, b.take(1002, 0, &c[3]));  // all users together are at their share
  EXPECT_EQ(0, b.take(0, 0, &c[3]));          // root is not counted in it
  EXPECT_EQ(0, b.take(0, 0, &c[4]));
  size_t over = 0;
  EXPECT_EQ(EMFILE, b.take(0, 0, &over));  // but has its own share
  b.give(1000, c[0]);
  EXPECT_EQ(0, b.take(1002, 0, &c[0]));
  b.give(1002, c[0]);
  b.give(0, 0);  // a refused take charged nothing
  EXPECT_EQ(0, b.take(1000, 0, &c[0]));
}

// Opens of ctl, and an issuer's, are outside the shared pool: users who fill it with status pages
// do not keep anyone from binding or advancing.
TEST(PageBudget, ExemptOpensAreOutsideTheSharedPool) {
  PageBudget b(2 * kMin, 2 * kMin);
  size_t c[4] = {};
  EXPECT_EQ(0, b.take(1000, 0, &c[0]));
  EXPECT_EQ(0, b.take(1001, 0, &c[1]));
  EXPECT_EQ(ENFILE, b.take(1002, 0, &c[2]));
  EXPECT_EQ(0, b.take(1002, 0, &c[2], true));
  EXPECT_EQ(0, b.take(1002, 0, &c[3], true));
  size_t over = 0;
  EXPECT_EQ(EMFILE, b.take(1002, 0, &over, true));  // its own share still holds
  b.give(1002, c[2], true);                         // gives nothing back to the pool
  EXPECT_EQ(ENFILE, b.take(1003, 0, &over));
  b.give(1000, c[0]);
  EXPECT_EQ(0, b.take(1003, 0, &over));
}

}  // namespace
}  // namespace fencefs::fs
