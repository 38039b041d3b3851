// Fence::acquire: the resource as the issuer (epoch + 1 in one durable record) and strict
// acquisition of an issuer's token (above the epoch, or refused as the issuer being behind).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>
#include <thread>

#include "fence/fence.h"
#include "journal/file_layer.h"

namespace fencefs::fence {
namespace {

struct Rig {
  std::string dir;
  std::unique_ptr<journal::StateStore> store;
  DomainTable domains;
  std::unique_ptr<Fence> fence;
  Caller root{1, 0, 0};
  Rig() {
    char t[] = "/tmp/fencefs-acquire-XXXXXX";
    dir = mkdtemp(t);
    journal::Options o;
    o.create_if_missing = true;
    std::string err;
    store = journal::StateStore::open(dir, o, journal::posix_file_layer(), &err);
    EXPECT_NE(store, nullptr) << err;
    for (const auto& d : store->domains()) domains.add(d.id, d.path, d.epoch, 0, 0);
    fence = std::make_unique<Fence>(Config{}, domains, *store, nullptr);
  }
  ~Rig() {
    fence.reset();
    store.reset();
    std::string cmd = "rm -rf '" + dir + "'";
    EXPECT_EQ(0, system(cmd.c_str()));
  }
  Domain& root_domain() { return *domains.root(); }
};

TEST(Acquire, IssuesEpochPlusOneDurably) {
  Rig r;
  Epoch got = 0;
  std::string why;
  ASSERT_EQ(0, r.fence->acquire(r.root_domain(), 0, "acquire", r.root, &got, &why)) << why;
  EXPECT_EQ(1u, got);
  ASSERT_EQ(0, r.fence->acquire(r.root_domain(), 0, "acquire", r.root, &got, &why)) << why;
  EXPECT_EQ(2u, got);
  uint64_t durable = 0;
  ASSERT_EQ(0, r.store->durable_epoch(r.root_domain().id, &durable));
  EXPECT_EQ(2u, durable) << "the issued epoch is the durable epoch: one record";
}

TEST(Acquire, ConcurrentAcquisitionsNeverShareAnEpoch) {
  Rig r;
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::vector<Epoch>> got(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++)
    ts.emplace_back([&, t] {
      for (int k = 0; k < kEach; k++) {
        Epoch e = 0;
        std::string why;
        if (r.fence->acquire(r.root_domain(), 0, "acquire", r.root, &e, &why) == 0)
          got[t].push_back(e);
      }
    });
  for (auto& t : ts) t.join();
  std::set<Epoch> all;
  for (auto& v : got) all.insert(v.begin(), v.end());
  EXPECT_EQ(static_cast<size_t>(kThreads * kEach), all.size()) << "an epoch was issued twice";
  EXPECT_EQ(static_cast<Epoch>(kThreads * kEach), *all.rbegin());
}

TEST(Acquire, TokenMustBeAboveTheEpoch) {
  Rig r;
  Epoch got = 0;
  std::string why;
  ASSERT_EQ(0, r.fence->acquire(r.root_domain(), 5, "acquire", r.root, &got, &why)) << why;
  EXPECT_EQ(5u, got);
  // Equal is an ordinary advance's no-op, but never an acquisition: two owners of one epoch.
  EXPECT_EQ(ESTALE, r.fence->acquire(r.root_domain(), 5, "acquire", r.root, &got, &why));
  EXPECT_NE(std::string::npos, why.find("issuer is behind")) << why;
  EXPECT_EQ(ESTALE, r.fence->acquire(r.root_domain(), 3, "acquire", r.root, &got, &why));
  EXPECT_EQ(5u, r.root_domain().epoch.load());
  EXPECT_EQ(ERANGE, r.fence->acquire(r.root_domain(), 5 + kDefaultMaxJump + 1, "acquire", r.root,
                                     &got, &why));
  ASSERT_EQ(0, r.fence->acquire(r.root_domain(), 6, "resync", r.root, &got, &why)) << why;
  EXPECT_EQ(6u, got);
}

}  // namespace
}  // namespace fencefs::fence
