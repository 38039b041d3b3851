// The rule's every verdict, for every kind of request: errno, reason and message.
#include "fence/decision.h"

#include <gtest/gtest.h>

namespace fencefs::fence {
namespace {

Decision d(RequestKind k, Epoch token, Epoch epoch, Epoch max_stamp = 0, bool force = false,
           bool stale_handle = false) {
  Request r;
  r.kind = k;
  r.token = token;
  r.epoch = epoch;
  r.max_stamp = max_stamp;
  r.max_jump = 10;
  r.force = force;
  r.stale_handle = stale_handle;
  r.domain = "/jobs";
  return decide(r);
}

TEST(Decide, Admit) {
  auto missing = d(RequestKind::Admit, 0, 5);
  EXPECT_EQ(EPERM, missing.err);
  EXPECT_EQ(Reason::Missing, missing.reason);
  EXPECT_EQ(Verdict::Missing, missing.verdict);
  auto stale = d(RequestKind::Admit, 4, 5);
  EXPECT_EQ(ESTALE, stale.err);
  EXPECT_EQ(Reason::Stale, stale.reason);
  EXPECT_EQ("stale token 4 < epoch 5", stale.message);
  auto equal = d(RequestKind::Admit, 5, 5);
  EXPECT_FALSE(equal.refused());
  EXPECT_FALSE(equal.raise);
  auto higher = d(RequestKind::Admit, 15, 5);
  EXPECT_FALSE(higher.refused());
  EXPECT_TRUE(higher.raise);
  auto far = d(RequestKind::Admit, 16, 5);
  EXPECT_EQ(ERANGE, far.err);
  EXPECT_EQ(Reason::TooFar, far.reason);
  EXPECT_EQ("token 16 is more than max_jump 10 above epoch 5 of domain /jobs", far.message);
}

TEST(Decide, RollbackRefusesTokensBelowTheStamp) {
  auto r = d(RequestKind::Admit, 6, 5, 7);
  EXPECT_EQ(EIO, r.err);
  EXPECT_EQ(Reason::Rollback, r.reason);
  EXPECT_EQ(Verdict::Rollback, r.verdict);
  EXPECT_NE(std::string::npos, r.message.find("rollback detected"));
  EXPECT_EQ(EIO, d(RequestKind::Advance, 6, 5, 7).err);
  // A token at least the stamp heals it: it raises the epoch.
  EXPECT_TRUE(d(RequestKind::Admit, 7, 5, 7).raise);
  // A stamp not above the epoch is no evidence.
  EXPECT_FALSE(d(RequestKind::Admit, 5, 5, 5).refused());
  // Binding is not a mutation: the mutations presenting the token are judged.
  EXPECT_FALSE(d(RequestKind::Bind, 6, 5, 7).refused());
}

TEST(Decide, Advance) {
  auto none = d(RequestKind::Advance, 0, 5);
  EXPECT_EQ(EINVAL, none.err);
  EXPECT_EQ(Reason::Malformed, none.reason);
  EXPECT_EQ(ESTALE, d(RequestKind::Advance, 4, 5).err);
  auto equal = d(RequestKind::Advance, 5, 5);
  EXPECT_FALSE(equal.refused());
  EXPECT_FALSE(equal.raise);
  EXPECT_EQ("domain /jobs already at epoch 5", equal.message);
  auto up = d(RequestKind::Advance, 8, 5);
  EXPECT_TRUE(up.raise);
  EXPECT_EQ("domain /jobs advanced to epoch 8", up.message);
  EXPECT_EQ(ERANGE, d(RequestKind::Advance, 100, 5).err);
  EXPECT_TRUE(d(RequestKind::Advance, 100, 5, 0, /*force=*/true).raise);
  EXPECT_TRUE(d(RequestKind::Advance, kMaxToken, 0, 0, true).raise);
  EXPECT_EQ(ERANGE, d(RequestKind::Admit, 100, 5, 0, /*force=*/true).err)
      << "force is for advances";
}

TEST(Decide, BindAndIoctlRefuseStaleTokensAndSquatting) {
  for (RequestKind k : {RequestKind::Bind, RequestKind::Ioctl}) {
    auto stale = d(k, 4, 5);
    EXPECT_EQ(ESTALE, stale.err) << "a stale token is refused at bind time";
    EXPECT_EQ(Reason::Stale, stale.reason);
    EXPECT_EQ("stale token 4 < epoch 5", stale.message);
    EXPECT_EQ(EINVAL, d(k, 0, 5).err) << "no token is malformed, never a bypass";
    EXPECT_FALSE(d(k, 5, 5).refused());
    EXPECT_FALSE(d(k, 15, 5).refused());
    EXPECT_FALSE(d(k, 15, 5).raise) << "binding raises nothing";
    auto far = d(k, 16, 5);
    EXPECT_EQ(ERANGE, far.err);
    EXPECT_EQ(Reason::TooFar, far.reason);
  }
  auto stale_handle = d(RequestKind::Ioctl, 6, 5, 0, false, /*stale_handle=*/true);
  EXPECT_EQ(ESTALE, stale_handle.err);
  EXPECT_EQ(Reason::Stale, stale_handle.reason);
}

TEST(Decide, DurabilityFailure) {
  auto f = durability_failure(7, EIO);
  EXPECT_EQ(EIO, f.err);
  EXPECT_EQ(Reason::Io, f.reason);
  EXPECT_NE(std::string::npos, f.message.find("could not make epoch 7 durable"));
}

}  // namespace
}  // namespace fencefs::fence
