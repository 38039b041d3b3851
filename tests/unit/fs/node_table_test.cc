// The FUSE node id table: ids are slot indices with a generation, never addresses.
#include "fs/node_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace fencefs::fs {
namespace {

TEST(NodeTable, FixedIdsResolve) {
  NodeTable t;
  int root = 0, ctl = 0;
  t.set_fixed(1, &root);
  t.set_fixed(2, &ctl);
  EXPECT_EQ(&root, t.get(1));
  EXPECT_EQ(&ctl, t.get(2));
  EXPECT_EQ(nullptr, t.get(3));  // fixed but unset
  EXPECT_EQ(nullptr, t.get(0));
  EXPECT_THROW(t.set_fixed(0, &root), std::logic_error);
  EXPECT_THROW(t.set_fixed(NodeTable::kFirstDynamic, &root), std::logic_error);
}

TEST(NodeTable, IdsAreNotAddresses) {
  NodeTable t;
  std::vector<int> objs(1000);
  for (int& o : objs) {
    uint64_t id = t.add(&o);
    EXPECT_NE(reinterpret_cast<uint64_t>(&o), id);
    EXPECT_GE(static_cast<uint32_t>(id), NodeTable::kFirstDynamic);
    EXPECT_LT(static_cast<uint32_t>(id), NodeTable::kFirstDynamic + objs.size());
    EXPECT_EQ(&o, t.get(id));
  }
}

TEST(NodeTable, StaleAndForgedIdsAreRejected) {
  NodeTable t;
  int a = 0, b = 0;
  uint64_t ida = t.add(&a);
  t.remove(ida);
  EXPECT_EQ(nullptr, t.get(ida));  // stale
  uint64_t idb = t.add(&b);        // reuses the slot with another generation
  EXPECT_EQ(static_cast<uint32_t>(ida), static_cast<uint32_t>(idb));
  EXPECT_NE(ida, idb);
  EXPECT_EQ(nullptr, t.get(ida));
  EXPECT_EQ(&b, t.get(idb));
  t.remove(ida);  // removing a stale id does nothing
  EXPECT_EQ(&b, t.get(idb));
  // Forged ids: addresses, huge slots, zero generation on a dynamic slot, other generations.
  EXPECT_EQ(nullptr, t.get(reinterpret_cast<uint64_t>(&b)));
  EXPECT_EQ(nullptr, t.get(~0ULL));
  EXPECT_EQ(nullptr, t.get(static_cast<uint32_t>(idb)));
  EXPECT_EQ(nullptr, t.get(idb + (1ULL << 32)));
  EXPECT_EQ(nullptr, t.get((1ULL << 32) | 1));  // a generation on a fixed slot
  EXPECT_EQ(nullptr, t.get((1ULL << 32) | 0x0fffffff));
  std::mt19937_64 rng(42);
  for (int k = 0; k < 100000; k++) {
    uint64_t id = rng();
    if (id == idb) continue;
    EXPECT_EQ(nullptr, t.get(id)) << id;
  }
}

TEST(NodeTable, HundredThousandLookupsAndForgets) {
  NodeTable t;
  constexpr int kN = 100000;
  std::vector<int> objs(kN);
  std::unordered_map<uint64_t, int*> live;
  std::mt19937 rng(7);
  for (int round = 0; round < 3; round++) {
    for (int& o : objs) {
      uint64_t id = t.add(&o);
      ASSERT_TRUE(live.emplace(id, &o).second) << "id reused while live";
    }
    EXPECT_EQ(static_cast<size_t>(kN), t.size());
    for (auto& [id, p] : live) ASSERT_EQ(p, t.get(id));
    std::vector<uint64_t> ids;
    for (auto& [id, p] : live) ids.push_back(id);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (uint64_t id : ids) t.remove(id);
    for (uint64_t id : ids) ASSERT_EQ(nullptr, t.get(id));
    live.clear();
    EXPECT_EQ(0u, t.size());
  }
}

}  // namespace
}  // namespace fencefs::fs
