// The Fence module without root or a mount: admissions and advances over a journal on the
// fault-injecting file layer, an audit log in a temp dir and an in-memory process table.
#include "fence/fence.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "journal/fault_injection.h"
#include "unit/fence/fake_processes.h"
#include "unit/journal/test_util.h"

namespace fencefs::fence {
namespace {

using journal::FaultInjectionFileLayer;
using journal::testing::TempDir;
using testing::FakeProcesses;

std::string read_all(const std::string& path) {
  std::string out;
  journal::posix_file_layer().read_file(path, &out);
  return out;
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) n++;
  return n;
}

class FenceTest : public ::testing::Test {
 protected:
  FenceTest() : fi_(journal::posix_file_layer(), /*forward_syncs=*/false) {
    store_ = journal::testing::create_store(t_.state(), fi_);
    domains_.add(0, "/", 0, 0, 0);
    audit::Options ao;
    ao.dir = t_.path();
    log_ = std::make_unique<audit::Log>(ao);
    Config cfg;
    cfg.max_jump = 100;
    fence_ = std::make_unique<Fence>(cfg, domains_, *store_, log_.get(), nullptr, procs_);
    job_ = procs_.spawn(1);
    caller_ = Caller{job_, 1000, 1000};
  }
  Domain& root() { return *domains_.root(); }
  int admit(Epoch token, Epoch stamp = 0) {
    Admission a;
    return fence_->admit(root(), token, stamp, caller_, Op{"write", {-1, "f"}, {}}, &a);
  }
  uint64_t refused(Reason r) { return root().refused[static_cast<int>(r)].load(); }
  std::string audit_text() { return read_all(t_.path() + "/audit.log"); }
  Epoch durable() {
    Epoch e = 0;
    EXPECT_EQ(0, store_->durable_epoch(0, &e));
    return e;
  }

  TempDir t_;
  FaultInjectionFileLayer fi_;
  std::unique_ptr<journal::StateStore> store_;
  DomainTable domains_;
  std::unique_ptr<audit::Log> log_;
  FakeProcesses procs_;
  std::unique_ptr<Fence> fence_;
  pid_t job_ = 0;
  Caller caller_;
};

TEST_F(FenceTest, RefusalsBeyondTheRateReadNothingFromProc) {
  // A flood of refusals from one uid: each is counted, but only those written to the audit trail
  // (the burst of 200) pay for the /proc read that names the caller.
  const size_t before = procs_.identity_reads();
  for (int k = 0; k < 2000; k++) ASSERT_EQ(EPERM, admit(0));
  EXPECT_EQ(2000u, refused(Reason::Missing));
  EXPECT_LT(procs_.identity_reads() - before, 400u);
  EXPECT_GE(procs_.identity_reads() - before, 200u) << "the written ones still name the caller";
  EXPECT_NE(std::string::npos, audit_text().find("\"comm\":\"job\""));
  EXPECT_EQ(0, admit(1)) << "the owner is admitted meanwhile";
}

TEST_F(FenceTest, EveryVerdictOfAnAdmission) {
  EXPECT_EQ(EPERM, admit(0));
  EXPECT_EQ(1u, refused(Reason::Missing));
  EXPECT_EQ(0, admit(3)) << "higher: advances";
  EXPECT_EQ(3u, root().epoch.load());
  EXPECT_EQ(3u, durable()) << "durable before the mutation is admitted";
  EXPECT_EQ(0, admit(3)) << "equal";
  EXPECT_EQ(ESTALE, admit(2));
  EXPECT_EQ(1u, refused(Reason::Stale));
  EXPECT_EQ(ERANGE, admit(104));
  EXPECT_EQ(1u, refused(Reason::TooFar));
  EXPECT_EQ(2u, root().accepted.load());
  EXPECT_EQ(1u, root().advances.load());
  std::string log = audit_text();
  EXPECT_EQ(1u, count(log, "\"decision\":\"advanced\""));
  EXPECT_EQ(3u, count(log, "\"decision\":\"refused\""));
  EXPECT_NE(std::string::npos, log.find("\"reason\":\"too_far\""));
  EXPECT_NE(std::string::npos, log.find("\"comm\":\"job\"")) << "named through ProcessInfo";
}

TEST_F(FenceTest, AdvanceSurvivesPowerLossAndNeverRollsBack) {
  std::string why;
  EXPECT_EQ(0, fence_->advance(root(), 7, false, caller_, &why)) << why;
  EXPECT_EQ(0, fence_->advance(root(), 7, false, caller_, &why));
  EXPECT_EQ("domain / already at epoch 7", why);
  EXPECT_EQ(ESTALE, fence_->advance(root(), 6, false, caller_, &why));
  EXPECT_EQ(ERANGE, fence_->advance(root(), 1000, false, caller_, &why));
  EXPECT_EQ(0, fence_->advance(root(), 1000, true, caller_, &why)) << "force lifts max_jump";
  fence_.reset();
  store_.reset();
  fi_.drop_unsynced();
  std::string err;
  auto again = journal::testing::reopen(t_.state(), fi_, &err);
  ASSERT_NE(nullptr, again) << err;
  Epoch e = 0;
  EXPECT_EQ(0, again->durable_epoch(0, &e));
  EXPECT_EQ(1000u, e);
}

TEST_F(FenceTest, FailedFsyncPoisonsAdvancesNotEqualWork) {
  ASSERT_EQ(0, admit(2));
  fi_.fail_syncs(true);
  std::string why;
  EXPECT_EQ(EIO, fence_->advance(root(), 3, false, caller_, &why));
  EXPECT_NE(std::string::npos, why.find("could not make epoch 3 durable")) << why;
  EXPECT_EQ(1u, refused(Reason::Io));
  EXPECT_TRUE(store_->poisoned());
  EXPECT_EQ(2u, root().epoch.load()) << "an epoch not durable is not in force";
  EXPECT_EQ(0, admit(2)) << "equal-epoch work continues";
  EXPECT_EQ(EIO, admit(3)) << "the rewrite fails too while syncs fail";
  EXPECT_EQ(EIO, admit(3)) << "and is not retried at once";
  fi_.fail_syncs(false);
  // The next attempt (at most one per 100 ms) rewrites the state into fresh files.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(0, fence_->advance(root(), 3, false, caller_, &why)) << why;
  EXPECT_FALSE(store_->poisoned());
  EXPECT_EQ(3u, durable());
  EXPECT_NE(std::string::npos, audit_text().find("\"op\":\"journal_rewrite\""));
}

TEST_F(FenceTest, RollbackRefusesTokensBelowAStampUntilHealed) {
  ASSERT_EQ(0, admit(2));
  EXPECT_EQ(EIO, admit(2, /*stamp=*/9)) << "a file carries epoch 9, the state says 2";
  EXPECT_EQ(1u, refused(Reason::Rollback));
  EXPECT_EQ(EIO, admit(5));
  std::string why;
  EXPECT_EQ(EIO, fence_->advance(root(), 5, false, caller_, &why));
  EXPECT_NE(std::string::npos, why.find("rollback detected")) << why;
  EXPECT_EQ(0, admit(9)) << "a token at least the stamp heals";
  EXPECT_EQ(9u, durable());
  EXPECT_EQ(0, admit(9));
}

TEST_F(FenceTest, NothingAdmittedUnderNLandsAfterNPlusOneActed) {
  ASSERT_EQ(0, admit(1));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> admitted{0}, violations{0}, refused_after{0};
  std::atomic<bool> advanced{false};
  std::vector<std::thread> writers;
  for (int k = 0; k < 8; k++) {
    writers.emplace_back([&] {
      while (!stop.load()) {
        Admission a;
        bool after = advanced.load();
        int err = fence_->admit(root(), 1, 0, caller_, Op{"write", {-1, "f"}, {}}, &a);
        if (err == 0) {
          // The "mutation": the epoch must stay 1 for as long as the admission lives.
          if (root().epoch.load() != 1 || after) violations++;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          if (root().epoch.load() != 1) violations++;
          admitted++;
        } else if (err == ESTALE) {
          refused_after++;
        } else {
          violations++;
        }
      }
    });
  }
  while (admitted.load() < 100) std::this_thread::yield();
  // Writer preference: the advance waits only for admissions already in flight, although the
  // overlapping writers never leave the shared lock free.
  auto start = std::chrono::steady_clock::now();
  std::string why;
  std::thread advancer([&] {
    EXPECT_EQ(0, fence_->advance(root(), 2, false, caller_, &why)) << why;
    advanced = true;
  });
  while (!advanced.load() && std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool in_time = advanced.load();
  auto refused_then = refused_after.load();
  while (refused_after.load() < refused_then + 100 && in_time) std::this_thread::yield();
  stop = true;
  advancer.join();
  for (auto& w : writers) w.join();
  EXPECT_TRUE(in_time) << "the advance was starved by overlapping admissions";
  EXPECT_EQ(0u, violations.load());
  EXPECT_EQ(2u, durable());
  EXPECT_EQ(ESTALE, admit(1));
}

TEST_F(FenceTest, IssuersByUidGidAndSupplementaryGroups) {
  Config cfg;
  cfg.issuer_uids = {0};
  cfg.issuer_gids = {50};
  Fence f(cfg, domains_, *store_, nullptr, nullptr, procs_);
  EXPECT_TRUE(f.is_issuer(Caller{job_, 0, 0}));
  EXPECT_FALSE(f.is_issuer(Caller{job_, 1000, 1000}));
  EXPECT_TRUE(f.is_issuer(Caller{job_, 1000, 50}));
  procs_.set_groups(job_, {7, 50});
  EXPECT_TRUE(f.is_issuer(Caller{job_, 1000, 1000})) << "a supplementary group";
  std::string why;
  TokenText unsigned_token{3, {}};
  EXPECT_EQ(0, f.authorize(Caller{job_, 1000, 1000}, root(), unsigned_token, true, &why));
  procs_.set_groups(job_, {});
  EXPECT_EQ(EACCES, f.authorize(Caller{job_, 1000, 1000}, root(), unsigned_token, false, &why));
}

TEST_F(FenceTest, SignedTokensAuthorizeWithoutIssuerPower) {
  Config cfg;
  cfg.token_key = "k3y";
  Fence f(cfg, domains_, *store_, nullptr, nullptr, procs_);
  Caller nobody{job_, 65534, 65534};
  std::string why;
  TokenText good{4, sign("k3y", "/", 4)};
  EXPECT_EQ(0, f.authorize(nobody, root(), good, false, &why)) << why;
  EXPECT_EQ(EACCES, f.authorize(nobody, root(), good, true, &why)) << "force needs an issuer";
  TokenText other{5, sign("k3y", "/", 4)};
  EXPECT_EQ(EACCES, f.authorize(nobody, root(), other, false, &why));
}

TEST_F(FenceTest, ControlRefusalsCountAndAuditThroughTheSameFunction) {
  Subject s{"bind", &root(), {}, "7"};
  EXPECT_EQ(EACCES, fence_->refuse(caller_, s, Reason::Unauthorised, EACCES, "not an issuer"));
  EXPECT_EQ(1u, refused(Reason::Unauthorised));
  Subject parse{"ctl", nullptr, "", ""};
  EXPECT_EQ(EINVAL, fence_->refuse(caller_, parse, Reason::Malformed, EINVAL, "bad line"));
  fence_->note(caller_, Subject{"bind", &root(), {}, "7"}, "bound", "bound pid");
  std::string log = audit_text();
  EXPECT_NE(std::string::npos, log.find("\"op\":\"bind\",\"decision\":\"refused\","
                                        "\"reason\":\"unauthorised\",\"domain\":\"/\""));
  EXPECT_NE(std::string::npos, log.find("\"op\":\"ctl\",\"decision\":\"refused\""));
  EXPECT_NE(std::string::npos, log.find("\"decision\":\"bound\""));
  // The bind ioctl and the control file judge tokens by the same rule.
  EXPECT_EQ(ERANGE, fence_->decide(RequestKind::Bind, root(), 101).err);
  EXPECT_EQ(0, fence_->decide(RequestKind::Bind, root(), 100).err);
  std::string why;
  EXPECT_EQ(ERANGE, fence_->check_jump(root(), 101, &why));
  EXPECT_EQ("token 101 is more than max_jump 100 above epoch 0 of domain /", why);
}

TEST_F(FenceTest, AnEstaleRetriedByTheKernelCountsOnce) {
  ASSERT_EQ(0, admit(2));
  EXPECT_EQ(ESTALE, admit(1));
  EXPECT_EQ(ESTALE, admit(1));
  EXPECT_EQ(1u, refused(Reason::Stale));
}

}  // namespace
}  // namespace fencefs::fence
