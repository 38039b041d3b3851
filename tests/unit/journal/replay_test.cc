// The replay engine: the same records under the strict policy (open, check) and the lenient one
// (offline recovery), and the report it leaves for the caller to decide on.
#include "journal/replay.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fencefs::journal {
namespace {

using format::FileKind;
using format::Record;
using format::ScanEnd;

Record advance(uint32_t id, uint64_t epoch) {
  Record r;
  r.type = format::kAdvance;
  r.id = id;
  r.epoch = epoch;
  return r;
}
Record add(uint32_t id, const std::string& path) {
  Record r;
  r.type = format::kDomainAdd;
  r.id = id;
  r.path = path;
  return r;
}
Record state(uint32_t id, const std::string& path, uint64_t epoch) {
  Record r;
  r.type = format::kDomainState;
  r.id = id;
  r.path = path;
  r.epoch = epoch;
  return r;
}
Record end(uint32_t count) {
  Record r;
  r.type = format::kSnapshotEnd;
  r.count = count;
  return r;
}

// A file of `kind` holding `records`; *offsets receives where each record starts.
struct File {
  std::string bytes;
  uint32_t seed = 0;
  std::vector<uint64_t> offsets;
};
File make(FileKind kind, const std::vector<Record>& records) {
  File f;
  format::FileHeader h;
  f.bytes = format::encode_header(kind, h, &f.seed);
  uint32_t chain = f.seed;
  for (const auto& r : records) {
    f.offsets.push_back(f.bytes.size());
    format::append_record(&f.bytes, &chain, r);
  }
  return f;
}

struct Outcome {
  ReplayResult result;
  ReplayState state;
};
Outcome run(const File& f, FileKind kind, ReplayPolicy policy, ReplayState start = {}) {
  Outcome r;
  r.state = std::move(start);
  r.result = replay(f.bytes, kind, f.seed, policy, &r.state);
  return r;
}
ReplayState root_and_a() {
  ReplayState s;
  s.add(0, "/", 0);
  s.add(1, "/a", 10);
  return s;
}

TEST(Replay, StrictRefusesAnAdvanceNotAboveTheEpochAndKeepsThePrefix) {
  File f = make(FileKind::kJournal, {advance(1, 11), advance(1, 11), advance(1, 12)});
  Outcome r = run(f, FileKind::kJournal, ReplayPolicy::kStrict, root_and_a());
  EXPECT_EQ(ScanEnd::kCorrupt, r.result.scan.end);
  EXPECT_EQ(f.offsets[1], r.result.scan.bad_offset);
  EXPECT_NE(std::string::npos, r.result.scan.reason.find("not above its epoch 11"))
      << r.result.scan.reason;
  EXPECT_EQ(11u, r.state.by_id.at(1).epoch);  // the record before the bad one stays applied
  EXPECT_EQ(1u, r.result.advances);
}

TEST(Replay, LenientKeepsTheHighestEpochAndSkipsLowerOnes) {
  File f = make(FileKind::kJournal, {advance(1, 15), advance(1, 12), advance(0, 3)});
  Outcome r = run(f, FileKind::kJournal, ReplayPolicy::kLenient, root_and_a());
  EXPECT_EQ(ScanEnd::kClean, r.result.scan.end) << r.result.scan.reason;
  EXPECT_EQ(3u, r.result.scan.records);
  EXPECT_EQ(15u, r.state.by_id.at(1).epoch);
  EXPECT_EQ(3u, r.state.by_id.at(0).epoch);
  EXPECT_EQ(2u, r.result.advances);
  EXPECT_EQ(1u, r.result.skipped);
}

TEST(Replay, RepeatedDomainAddIsCorruptionStrictlyAndSkippedLeniently) {
  File f = make(FileKind::kJournal, {add(1, "/a"), add(2, "/b")});
  Outcome strict = run(f, FileKind::kJournal, ReplayPolicy::kStrict, root_and_a());
  EXPECT_EQ(ScanEnd::kCorrupt, strict.result.scan.end);
  EXPECT_EQ(f.offsets[0], strict.result.scan.bad_offset);
  EXPECT_EQ(0u, strict.state.by_id.count(2));

  Outcome lenient = run(f, FileKind::kJournal, ReplayPolicy::kLenient, root_and_a());
  EXPECT_EQ(ScanEnd::kClean, lenient.result.scan.end) << lenient.result.scan.reason;
  EXPECT_EQ(10u, lenient.state.by_id.at(1).epoch);  // the repeat does not reset the epoch
  EXPECT_EQ("/b", lenient.state.by_id.at(2).path);
  EXPECT_EQ(1u, lenient.result.adds);
  EXPECT_EQ(1u, lenient.result.skipped);
}

TEST(Replay, BothPoliciesStopAtWhatWouldInventState) {
  struct Case {
    std::vector<Record> records;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {{advance(9, 1)}, "unknown domain id 9"},
      {{add(1, "/other")}, "existing domain id 1"},
      {{add(5, "/a")}, "existing domain path /a"},
      {{state(5, "/c", 1)}, "not allowed in a journal"},
  };
  for (const auto& c : cases) {
    File f = make(FileKind::kJournal, c.records);
    for (auto policy : {ReplayPolicy::kStrict, ReplayPolicy::kLenient}) {
      Outcome r = run(f, FileKind::kJournal, policy, root_and_a());
      EXPECT_EQ(ScanEnd::kCorrupt, r.result.scan.end) << c.reason;
      EXPECT_NE(std::string::npos, r.result.scan.reason.find(c.reason)) << r.result.scan.reason;
      EXPECT_EQ(2u, r.state.by_id.size()) << c.reason;
    }
  }
}

TEST(Replay, SnapshotEndCountIsCheckedOnlyStrictly) {
  File f = make(FileKind::kSnapshot, {state(0, "/", 4), state(1, "/a", 7), end(3)});
  Outcome strict = run(f, FileKind::kSnapshot, ReplayPolicy::kStrict);
  EXPECT_EQ(ScanEnd::kCorrupt, strict.result.scan.end);
  EXPECT_EQ(f.offsets[2], strict.result.scan.bad_offset);
  EXPECT_FALSE(strict.result.snapshot_end);

  Outcome lenient = run(f, FileKind::kSnapshot, ReplayPolicy::kLenient);
  EXPECT_EQ(ScanEnd::kClean, lenient.result.scan.end) << lenient.result.scan.reason;
  EXPECT_TRUE(lenient.result.snapshot_end);
  EXPECT_EQ(7u, lenient.state.by_id.at(1).epoch);
}

TEST(Replay, SnapshotRulesShared) {
  const std::vector<std::pair<std::vector<Record>, std::string>> cases = {
      {{state(0, "/", 0), end(1), state(1, "/a", 0)}, "record after SNAPSHOT_END"},
      {{state(0, "/", 0), state(0, "/b", 0)}, "duplicate domain id 0"},
      {{state(0, "/", 0), state(1, "/", 0)}, "duplicate domain path /"},
      {{advance(0, 1)}, "not allowed in a snapshot"},
  };
  for (const auto& [records, reason] : cases) {
    File f = make(FileKind::kSnapshot, records);
    for (auto policy : {ReplayPolicy::kStrict, ReplayPolicy::kLenient}) {
      Outcome r = run(f, FileKind::kSnapshot, policy);
      EXPECT_EQ(ScanEnd::kCorrupt, r.result.scan.end) << reason;
      EXPECT_NE(std::string::npos, r.result.scan.reason.find(reason)) << r.result.scan.reason;
    }
  }
}

TEST(Replay, TornTailIsReportedForTheCallerToDecide) {
  File f = make(FileKind::kJournal, {advance(1, 11), advance(1, 12)});
  const uint64_t cut = f.offsets[1] + 5;  // inside the last record's header
  f.bytes.resize(cut);
  for (auto policy : {ReplayPolicy::kStrict, ReplayPolicy::kLenient}) {
    Outcome r = run(f, FileKind::kJournal, policy, root_and_a());
    EXPECT_EQ(ScanEnd::kTorn, r.result.scan.end);
    EXPECT_EQ(f.offsets[1], r.result.scan.bad_offset);
    EXPECT_EQ(f.offsets[1], r.result.scan.valid_end);
    EXPECT_EQ(11u, r.state.by_id.at(1).epoch);
  }
}

}  // namespace
}  // namespace fencefs::journal
