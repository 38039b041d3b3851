#include "journal/load.h"

#include <cerrno>

#include "common/error.h"

namespace fencefs::journal {
namespace {

using common::errstr;
using format::FileHeader;
using format::FileKind;
using format::ScanEnd;
using format::ScanResult;

struct SnapshotLoad {
  bool ok = false;
  FileHeader header;
  ReplayState state;
  std::string error;  // "PATH: reason at byte N"
};

SnapshotLoad load_snapshot(const std::string& path, std::string_view data) {
  SnapshotLoad out;
  uint32_t seed = 0;
  std::string why = format::decode_header(data, FileKind::kSnapshot, &out.header, &seed);
  if (!why.empty()) {
    out.error = at(path, 0, why);
    return out;
  }
  const ReplayResult rr =
      replay(data, FileKind::kSnapshot, seed, ReplayPolicy::kStrict, &out.state);
  const ScanResult& sr = rr.scan;
  // A snapshot is synced before it is renamed into place, so unlike the journal it can have no
  // torn tail: anything short of a clean end is corruption.
  if (sr.end != ScanEnd::kClean) {
    out.error = at(path, sr.bad_offset, sr.reason);
    return out;
  }
  if (!rr.snapshot_end) {
    out.error = at(path, sr.valid_end, "missing SNAPSHOT_END (truncated snapshot)");
    return out;
  }
  auto root = out.state.by_id.find(0);
  if (root == out.state.by_id.end() || root->second.path != "/") {
    out.error = at(path, format::kHeaderSize, "no root domain (id 0, path \"/\")");
    return out;
  }
  out.ok = true;
  return out;
}

}  // namespace

// long: the reading of a state in order (directory, snapshot, journal, replay), each step
// deciding whether the state can be used.
Loaded load(const Paths& p, FileLayer& fs) {
  Loaded L;
  if (!fs.exists(p.dir)) {
    L.kind = Loaded::kNoState;
    L.message = "no state in " + p.dir + " (use --init to create)";
    return L;
  }
  for (const auto* tmp : {&p.snapshot_tmp, &p.journal_tmp}) {
    if (fs.exists(*tmp)) L.leftovers.push_back(*tmp);
  }
  std::string snap;
  int rs = fs.read_file(p.snapshot, &snap);
  int rj = fs.read_file(p.journal, &L.journal);
  auto fatal = [&](std::string msg) {
    L.kind = Loaded::kFatal;
    L.message = std::move(msg);
    return L;
  };
  L.unreadable = (rs != 0 && rs != ENOENT) || (rj != 0 && rj != ENOENT);
  if (rs != 0 && rs != ENOENT) return fatal(p.snapshot + ": cannot read: " + errstr(rs));
  if (rj != 0 && rj != ENOENT) return fatal(p.journal + ": cannot read: " + errstr(rj));
  if (rs == ENOENT && rj == ENOENT) {
    L.kind = Loaded::kNoState;
    L.message = "no state in " + p.dir + " (use --init to create)";
    return L;
  }
  if (rs == ENOENT) {
    // Initialisation writes the (empty) journal first and the snapshot second, so an empty
    // generation-0 journal alone is an interrupted initialisation, which held nothing.
    FileHeader h;
    uint32_t seed = 0;
    std::string why = format::decode_header(L.journal, FileKind::kJournal, &h, &seed);
    if (why.empty() && h.generation == 0 && L.journal.size() == format::kHeaderSize) {
      L.kind = Loaded::kNoState;
      L.message = "no state in " + p.dir +
                  " (an initialisation was interrupted before it completed; use --init to create)";
      return L;
    }
    return fatal(p.snapshot + ": missing while " + p.journal +
                 " exists (the journal alone cannot be trusted)");
  }
  L.snapshot_size = snap.size();
  SnapshotLoad s = load_snapshot(p.snapshot, snap);
  L.snapshot_header = s.header;
  L.state = std::move(s.state);
  if (!s.ok) return fatal(s.error);
  if (rj == ENOENT) {
    return fatal(p.journal + ": missing while " + p.snapshot +
                 " exists (records since the last snapshot may be lost)");
  }
  std::string why =
      format::decode_header(L.journal, FileKind::kJournal, &L.journal_header, &L.chain);
  if (!why.empty()) return fatal(at(p.journal, 0, why));
  if (L.journal_header.incarnation != L.snapshot_header.incarnation) {
    return fatal(p.journal + ": incarnation " +
                 format::incarnation_hex(L.journal_header.incarnation) + " differs from " +
                 p.snapshot + " incarnation " +
                 format::incarnation_hex(L.snapshot_header.incarnation) +
                 " (files of different state lineages)");
  }
  const uint64_t jg = L.journal_header.generation;
  const uint64_t sg = L.snapshot_header.generation;
  if (jg > sg) {
    return fatal(p.journal + ": generation " + std::to_string(jg) + " is newer than " + p.snapshot +
                 " generation " + std::to_string(sg) +
                 " (the snapshot is stale, e.g. restored from an older copy)");
  }
  if (jg < sg) {
    // Compaction renames the new snapshot into place before the new journal: everything in an
    // older journal is already in the snapshot.
    L.stale_journal = true;
    L.journal_valid_end = L.journal.size();
    return L;
  }
  const ScanResult sr =
      replay(L.journal, FileKind::kJournal, L.chain, ReplayPolicy::kStrict, &L.state).scan;
  L.records = sr.records;
  L.chain = sr.chain;
  L.journal_valid_end = sr.valid_end;
  if (sr.end == ScanEnd::kCorrupt) return fatal(at(p.journal, sr.bad_offset, sr.reason));
  if (sr.end == ScanEnd::kTorn) {
    L.torn = true;
    L.torn_reason = sr.reason;
  }
  return L;
}

CheckResult check(const std::string& dir, FileLayer& fs) {
  const Paths p(dir);
  CheckResult r;
  Loaded L = load(p, fs);
  if (L.kind == Loaded::kNoState) {
    r.findings.push_back(L.message);
    return r;
  }
  r.readable = !L.unreadable;
  if (L.kind == Loaded::kFatal) r.findings.push_back(L.message);
  if (L.torn) {
    r.findings.push_back(at(p.journal, L.journal_valid_end, "torn tail (" + L.torn_reason + ")") +
                         ": open() will cut " +
                         std::to_string(L.journal.size() - L.journal_valid_end) + " bytes");
  }
  if (L.stale_journal) {
    r.findings.push_back(p.journal + ": generation " + std::to_string(L.journal_header.generation) +
                         " is older than " + p.snapshot + " generation " +
                         std::to_string(L.snapshot_header.generation) +
                         ": covered by the snapshot (interrupted compaction); open() will "
                         "replace it");
  }
  for (const auto& tmp : L.leftovers) {
    r.findings.push_back(tmp + ": left by an interrupted compaction; open() will remove it");
  }
  r.domains = L.state.sorted();
  return r;
}

}  // namespace fencefs::journal
