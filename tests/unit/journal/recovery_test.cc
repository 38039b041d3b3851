// Recovery from damaged files: truncation at every byte, every single-byte flip, appended garbage,
// missing and mismatched files. Never more than was written, never silently less.
#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "journal/format.h"
#include "journal/journal.h"
#include "unit/journal/test_util.h"

namespace fencefs::journal {
namespace {

using testing::create_store;
using testing::NoSyncLayer;
using testing::read_bytes;
using testing::reopen;
using testing::state_of;
using testing::StateMap;
using testing::TempDir;
using testing::write_bytes;

// A journal of 20 records (domain adds and advances), with the state after each record.
struct Reference {
  std::string snapshot, journal;
  std::vector<uint64_t> starts;  // starts[k]: offset of record k
  std::vector<StateMap> after;   // after[k]: state with records [0, k) applied
  uint64_t end(size_t k) const { return k + 1 < starts.size() ? starts[k + 1] : journal.size(); }
};

Reference build_reference(const std::string& dir, FileLayer& fs) {
  Reference ref;
  auto s = create_store(dir, fs);
  if (s == nullptr) return ref;
  ref.after.push_back(state_of(*s));
  std::vector<std::function<int()>> ops = {
      [&] { return s->add_domain(1, "/a"); }, [&] { return s->advance(1, 1); },
      [&] { return s->advance(1, 2); },       [&] { return s->add_domain(2, "/b/c"); },
      [&] { return s->advance(2, 5); },       [&] { return s->advance(0, 1); },
      [&] { return s->advance(1, 3); },       [&] { return s->add_domain(3, "/d"); },
      [&] { return s->advance(3, 100); },     [&] { return s->advance(2, 6); },
      [&] { return s->advance(0, 2); },       [&] { return s->advance(1, 4); },
      [&] { return s->advance(3, 101); },     [&] { return s->add_domain(4, "/b/c/d/e"); },
      [&] { return s->advance(4, 1); },       [&] { return s->advance(4, 1000000000000ull); },
      [&] { return s->advance(0, 3); },       [&] { return s->advance(2, 7); },
      [&] { return s->advance(1, 5); },       [&] { return s->advance(3, 102); },
  };
  for (auto& op : ops) {
    ref.starts.push_back(s->stats().journal_bytes);
    EXPECT_EQ(op(), 0);
    ref.after.push_back(state_of(*s));
  }
  EXPECT_EQ(s->stats().records, ops.size());
  s.reset();
  ref.snapshot = read_bytes(dir + "/snapshot");
  ref.journal = read_bytes(dir + "/journal");
  EXPECT_EQ(ref.journal.size(), ref.end(ops.size() - 1));
  return ref;
}

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = build_reference(dir(), fs_);
    ASSERT_EQ(ref_.starts.size(), 20u);
  }
  std::string dir() const { return tmp_.state(); }
  std::string jpath() const { return dir() + "/journal"; }
  std::string spath() const { return dir() + "/snapshot"; }
  void restore() {
    write_bytes(spath(), ref_.snapshot);
    write_bytes(jpath(), ref_.journal);
  }
  // Index of the record containing byte `off` (off >= header).
  size_t record_at(uint64_t off) const {
    size_t k = 0;
    while (k + 1 < ref_.starts.size() && ref_.starts[k + 1] <= off) ++k;
    return k;
  }

  TempDir tmp_;
  NoSyncLayer fs_;
  Reference ref_;
};

TEST_F(RecoveryTest, IntactJournalRecoversEverything) {
  std::string err;
  auto s = reopen(dir(), fs_, &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_EQ(state_of(*s), ref_.after.back());
  EXPECT_FALSE(s->report().torn_tail_cut);
  EXPECT_FALSE(s->report().created);
  EXPECT_EQ(s->report().records_replayed, 20u);
  EXPECT_EQ(s->report().torn_tail_offset, ref_.journal.size());
  EXPECT_EQ(s->report().incarnation.size(), 32u);
}

TEST_F(RecoveryTest, TruncationAtEveryOffset) {
  const std::string& j = ref_.journal;
  for (uint64_t cut = 0; cut <= j.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    restore();
    write_bytes(jpath(), j.substr(0, cut));
    std::string err;
    auto s = reopen(dir(), fs_, &err);
    if (cut < format::kHeaderSize) {
      ASSERT_EQ(s, nullptr);
      EXPECT_NE(err.find(jpath() + ": "), std::string::npos) << err;
      EXPECT_NE(err.find("at byte 0"), std::string::npos) << err;
      continue;
    }
    ASSERT_NE(s, nullptr) << err;
    size_t complete = 0;  // records fully inside the prefix
    while (complete < ref_.starts.size() && ref_.end(complete) <= cut) ++complete;
    const uint64_t boundary = complete == 0 ? format::kHeaderSize : ref_.end(complete - 1);
    EXPECT_EQ(state_of(*s), ref_.after[complete]);
    EXPECT_EQ(s->report().records_replayed, complete);
    EXPECT_EQ(s->report().torn_tail_cut, cut != boundary);
    EXPECT_EQ(s->report().torn_tail_offset, boundary);
    s.reset();
    // The cut is durable: the file is the valid prefix and opens cleanly again.
    EXPECT_EQ(read_bytes(jpath()), j.substr(0, boundary));
    auto again = reopen(dir(), fs_, &err);
    ASSERT_NE(again, nullptr) << err;
    EXPECT_FALSE(again->report().torn_tail_cut);
    EXPECT_EQ(state_of(*again), ref_.after[complete]);
  }
}

TEST_F(RecoveryTest, EveryByteFlipInJournal) {
  const std::string& j = ref_.journal;
  const size_t last = ref_.starts.size() - 1;
  for (uint64_t i = 0; i < j.size(); ++i) {
    SCOPED_TRACE("flip at " + std::to_string(i));
    std::string bad = j;
    bad[i] ^= static_cast<char>(0xFF);
    write_bytes(spath(), ref_.snapshot);
    write_bytes(jpath(), bad);
    std::string err;
    auto s = reopen(dir(), fs_, &err);
    if (i < format::kHeaderSize) {
      ASSERT_EQ(s, nullptr);
      EXPECT_NE(err.find(jpath() + ": "), std::string::npos) << err;
      EXPECT_NE(err.find("at byte 0"), std::string::npos) << err;
      continue;
    }
    const size_t k = record_at(i);
    const uint64_t start = ref_.starts[k];
    const bool in_length = i < start + 4;
    if (k == last && !in_length) {
      // A damaged final record reads as a torn write: exactly the prefix before it.
      ASSERT_NE(s, nullptr) << err;
      EXPECT_TRUE(s->report().torn_tail_cut);
      EXPECT_EQ(s->report().torn_tail_offset, start);
      EXPECT_EQ(state_of(*s), ref_.after[k]);
      continue;
    }
    ASSERT_EQ(s, nullptr) << "recovered a modified journal";
    EXPECT_NE(err.find(jpath() + ": "), std::string::npos) << err;
    EXPECT_NE(err.find("at byte " + std::to_string(start)), std::string::npos) << err;
    EXPECT_NE(err.find(in_length ? "length" : "bad CRC"), std::string::npos) << err;
    EXPECT_NE(err.find("fencectl recover"), std::string::npos) << err;
  }
}

TEST_F(RecoveryTest, EveryByteFlipInSnapshotIsRefused) {
  const std::string& snap = ref_.snapshot;
  for (uint64_t i = 0; i < snap.size(); ++i) {
    SCOPED_TRACE("flip at " + std::to_string(i));
    std::string bad = snap;
    bad[i] ^= static_cast<char>(0xFF);
    write_bytes(spath(), bad);
    write_bytes(jpath(), ref_.journal);
    std::string err;
    EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
    EXPECT_NE(err.find(spath() + ": "), std::string::npos) << err;
  }
  // A snapshot truncated anywhere, even at a record boundary, is refused (SNAPSHOT_END).
  for (uint64_t cut = 0; cut < snap.size(); ++cut) {
    write_bytes(spath(), snap.substr(0, cut));
    std::string err;
    EXPECT_EQ(reopen(dir(), fs_, &err), nullptr) << cut;
    EXPECT_NE(err.find(spath() + ": "), std::string::npos) << err;
  }
}

TEST_F(RecoveryTest, AppendedZerosAreATornTail) {
  for (size_t n : {1, 3, 8, 9, 21, 100, 4096}) {
    SCOPED_TRACE(n);
    restore();
    write_bytes(jpath(), ref_.journal + std::string(n, '\0'));
    std::string err;
    auto s = reopen(dir(), fs_, &err);
    ASSERT_NE(s, nullptr) << err;
    EXPECT_TRUE(s->report().torn_tail_cut);
    EXPECT_EQ(s->report().torn_tail_offset, ref_.journal.size());
    EXPECT_EQ(state_of(*s), ref_.after.back());
  }
}

TEST_F(RecoveryTest, AppendedRandomBytesAreNeverAccepted) {
  std::mt19937 rng(1234);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 64;
    std::string junk(n, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    SCOPED_TRACE(std::to_string(round) + ": " + std::to_string(n) + " bytes");
    restore();
    write_bytes(jpath(), ref_.journal + junk);
    std::string err;
    auto s = reopen(dir(), fs_, &err);
    if (s == nullptr) {
      EXPECT_NE(err.find("at byte " + std::to_string(ref_.journal.size())), std::string::npos)
          << err;
      continue;
    }
    EXPECT_TRUE(s->report().torn_tail_cut);
    EXPECT_EQ(s->report().torn_tail_offset, ref_.journal.size());
    EXPECT_EQ(state_of(*s), ref_.after.back());
  }
}

TEST_F(RecoveryTest, DuplicatedRecordFailsTheChain) {
  const std::string& j = ref_.journal;
  const size_t last = ref_.starts.size() - 1;
  for (size_t k : {size_t{0}, size_t{5}, last}) {
    SCOPED_TRACE(k);
    const std::string rec = j.substr(ref_.starts[k], ref_.end(k) - ref_.starts[k]);
    // One copy at the end: a final record with a bad (chained) CRC, cut as a torn write.
    restore();
    write_bytes(jpath(), j + rec);
    std::string err;
    auto s = reopen(dir(), fs_, &err);
    ASSERT_NE(s, nullptr) << err;
    EXPECT_TRUE(s->report().torn_tail_cut);
    EXPECT_EQ(state_of(*s), ref_.after.back());
    s.reset();
    // Two copies: the first has bytes after it, so it is corruption.
    restore();
    write_bytes(jpath(), j + rec + rec);
    EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
    EXPECT_NE(err.find("bad CRC at byte " + std::to_string(j.size())), std::string::npos) << err;
  }
  // A record spliced into the middle breaks the chain right there.
  const std::string rec = j.substr(ref_.starts[3], ref_.end(3) - ref_.starts[3]);
  restore();
  write_bytes(jpath(), j.substr(0, ref_.starts[8]) + rec + j.substr(ref_.starts[8]));
  std::string err;
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("at byte " + std::to_string(ref_.starts[8])), std::string::npos) << err;
}

TEST_F(RecoveryTest, RecordFromAnotherIncarnationIsNeverAccepted) {
  TempDir other_tmp;
  NoSyncLayer fs;
  Reference other = build_reference(other_tmp.state(), fs);
  ASSERT_EQ(other.starts.size(), 20u);
  // Same operations, so the records are byte-identical except for their chained CRCs.
  for (size_t k = 0; k < other.starts.size(); ++k) {
    const std::string rec = other.journal.substr(other.starts[k], other.end(k) - other.starts[k]);
    restore();
    write_bytes(jpath(), ref_.journal + rec);
    std::string err;
    auto s = reopen(dir(), fs_, &err);
    ASSERT_NE(s, nullptr) << err;
    EXPECT_TRUE(s->report().torn_tail_cut);
    EXPECT_EQ(state_of(*s), ref_.after.back());
  }
  // The other lineage's whole journal next to our snapshot: refused.
  write_bytes(spath(), ref_.snapshot);
  write_bytes(jpath(), other.journal);
  std::string err;
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("incarnation"), std::string::npos) << err;
  // Our journal with its records replaced by the other lineage's: refused at the first record.
  write_bytes(jpath(), ref_.journal.substr(0, format::kHeaderSize) +
                           other.journal.substr(format::kHeaderSize));
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("bad CRC at byte 40"), std::string::npos) << err;
}

TEST_F(RecoveryTest, BadCrcFollowedByZerosIsATornWrite) {
  std::string j = ref_.journal;
  j[j.size() - 1] ^= 0x55;
  write_bytes(jpath(), j + std::string(512, '\0'));
  std::string err;
  auto s = reopen(dir(), fs_, &err);
  ASSERT_NE(s, nullptr) << err;
  EXPECT_TRUE(s->report().torn_tail_cut);
  EXPECT_EQ(s->report().torn_tail_offset, ref_.starts.back());
  EXPECT_EQ(state_of(*s), ref_.after[ref_.starts.size() - 1]);
}

// Valid CRCs, impossible contents: written by a buggy or hostile writer, so refused even at the
// end of the file.
TEST_F(RecoveryTest, SemanticallyInvalidRecordsAreCorruption) {
  struct Case {
    format::Record rec;
    const char* why;
  };
  std::vector<Case> cases;
  format::Record r;
  r.type = format::kAdvance;
  r.id = 1;
  r.epoch = 5;  // domain 1 is at 5: not above
  cases.push_back({r, "not above"});
  r.epoch = 4;
  cases.push_back({r, "not above"});
  r.id = 99;
  r.epoch = 1000;
  cases.push_back({r, "unknown domain"});
  format::Record add;
  add.type = format::kDomainAdd;
  add.id = 2;
  add.path = "/new";
  cases.push_back({add, "existing domain id"});
  add.id = 50;
  add.path = "/a";
  cases.push_back({add, "existing domain path"});
  format::Record st;
  st.type = format::kDomainState;
  st.id = 77;
  st.path = "/x";
  cases.push_back({st, "not allowed in a journal"});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.why);
    // Follow the chain over the real file to append a correctly chained record.
    format::FileHeader h;
    uint32_t chain = 0;
    ASSERT_EQ(format::decode_header(ref_.journal, format::FileKind::kJournal, &h, &chain), "");
    format::ScanResult sr = format::scan(
        ref_.journal, chain, [](uint64_t, const format::Record&) { return std::string(); });
    ASSERT_EQ(sr.end, format::ScanEnd::kClean);
    std::string j = ref_.journal;
    uint32_t c2 = sr.chain;
    format::append_record(&j, &c2, c.rec);
    write_bytes(jpath(), j);
    std::string err;
    EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
    EXPECT_NE(err.find(c.why), std::string::npos) << err;
    EXPECT_NE(err.find("at byte " + std::to_string(ref_.journal.size())), std::string::npos) << err;
  }
}

TEST_F(RecoveryTest, MissingAndMismatchedFiles) {
  std::string err;
  // Journal without snapshot.
  ASSERT_EQ(fs_.remove(spath()), 0);
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("snapshot: missing"), std::string::npos) << err;
  // Snapshot without journal.
  restore();
  ASSERT_EQ(fs_.remove(jpath()), 0);
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("journal: missing"), std::string::npos) << err;
  // Nothing at all, and no directory at all.
  ASSERT_EQ(fs_.remove(spath()), 0);
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_EQ(err, "no state in " + dir() + " (use --init to create)");
  ASSERT_EQ(fs_.remove(dir()), 0);
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_EQ(err, "no state in " + dir() + " (use --init to create)");
  // Snapshot and journal swapped.
  ASSERT_EQ(fs_.mkdir(dir()), 0);
  write_bytes(spath(), ref_.journal);
  write_bytes(jpath(), ref_.snapshot);
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("not a snapshot"), std::string::npos) << err;
}

TEST_F(RecoveryTest, GenerationRules) {
  // Compact: snapshot and journal move to generation 1.
  {
    auto s = reopen(dir(), fs_);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->rewrite(), 0);
    EXPECT_EQ(s->stats().compactions, 1u);
  }
  const std::string snap1 = read_bytes(spath());
  const std::string jrnl1 = read_bytes(jpath());
  std::string err;
  {
    auto s = reopen(dir(), fs_, &err);
    ASSERT_NE(s, nullptr) << err;
    EXPECT_EQ(s->report().generation, 1u);
    EXPECT_EQ(state_of(*s), ref_.after.back());
  }
  // The generation-0 journal next to the generation-1 snapshot: covered, replaced, not replayed.
  write_bytes(jpath(), ref_.journal);
  {
    auto s = reopen(dir(), fs_, &err);
    ASSERT_NE(s, nullptr) << err;
    EXPECT_EQ(state_of(*s), ref_.after.back());
    EXPECT_EQ(s->report().records_replayed, 0u);
    bool mentioned = false;
    for (const auto& m : s->report().messages) mentioned |= m.find("older") != std::string::npos;
    EXPECT_TRUE(mentioned);
    EXPECT_EQ(s->advance(1, 6), 0);
  }
  EXPECT_EQ(read_bytes(jpath()).substr(0, format::kHeaderSize),
            jrnl1.substr(0, format::kHeaderSize));
  // The generation-0 snapshot (an older copy) next to the generation-1 journal: refused.
  write_bytes(spath(), ref_.snapshot);
  write_bytes(jpath(), jrnl1);
  EXPECT_EQ(reopen(dir(), fs_, &err), nullptr);
  EXPECT_NE(err.find("is newer than"), std::string::npos) << err;
  // Back together, and leftover temp files are removed.
  write_bytes(spath(), snap1);
  write_bytes(dir() + "/snapshot.tmp", "junk");
  write_bytes(dir() + "/journal.tmp", "");
  {
    auto s = reopen(dir(), fs_, &err);
    ASSERT_NE(s, nullptr) << err;
  }
  EXPECT_FALSE(fs_.exists(dir() + "/snapshot.tmp"));
  EXPECT_FALSE(fs_.exists(dir() + "/journal.tmp"));
}

TEST_F(RecoveryTest, InterruptedInitialisationIsNoState) {
  // Initialisation writes the empty journal first: a lone empty generation-0 journal held nothing.
  TempDir t;
  NoSyncLayer fs;
  { auto s = create_store(t.state(), fs); }
  ASSERT_EQ(fs.remove(t.state() + "/snapshot"), 0);
  std::string err;
  EXPECT_EQ(reopen(t.state(), fs, &err), nullptr);
  EXPECT_NE(err.find("use --init"), std::string::npos) << err;
  auto s = create_store(t.state(), fs);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->report().created);
}

}  // namespace
}  // namespace fencefs::journal
