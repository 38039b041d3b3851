// Offline repair: recover_offline() salvages what the files still say (the lenient replay
// policy), raises every domain to a floor and writes a new lineage.
#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "journal/format.h"
#include "journal/journal.h"
#include "journal/replay.h"
#include "journal/state_files.h"

namespace fencefs::journal {
namespace {

using common::errstr;
using format::FileHeader;
using format::FileKind;
using format::Incarnation;
using format::ScanEnd;
using format::ScanResult;

// The report, one line at a time.
struct Lines {
  std::string text;
  void operator()(const std::string& s) { text += s + "\n"; }
};

// What the salvage found across both files.
struct Salvage {
  ReplayState state;
  uint64_t max_gen = 0;
  bool any_header = false;
  bool have_snap_inc = false;
  Incarnation snap_inc{};
};

// The longest valid prefix of the snapshot (its own chain, stopping at the first defect).
void salvage_snapshot(const Paths& p, const std::string& snap, Salvage* sv, Lines& line) {
  FileHeader h;
  uint32_t seed = 0;
  std::string why = format::decode_header(snap, FileKind::kSnapshot, &h, &seed);
  if (!why.empty()) {
    line(at(p.snapshot, 0, why) + ": nothing salvaged from it");
    return;
  }
  sv->any_header = true;
  sv->max_gen = h.generation;
  sv->snap_inc = h.incarnation;
  sv->have_snap_inc = true;
  const ReplayResult rr =
      replay(snap, FileKind::kSnapshot, seed, ReplayPolicy::kLenient, &sv->state);
  const ScanResult& sr = rr.scan;
  line(p.snapshot + ": generation " + std::to_string(h.generation) + ", incarnation " +
       format::incarnation_hex(h.incarnation) + ", " + std::to_string(sv->state.by_id.size()) +
       " domains salvaged from " + std::to_string(sr.valid_end) + " of " +
       std::to_string(snap.size()) + " bytes");
  if (sr.end != ScanEnd::kClean) {
    line(at(p.snapshot, sr.bad_offset, sr.reason) + ": the rest of the snapshot is ignored");
  } else if (!rr.snapshot_end) {
    line(at(p.snapshot, sr.valid_end, "missing SNAPSHOT_END (truncated snapshot)"));
  }
}

// The longest valid prefix of the journal, merged into what the snapshot gave (highest epoch
// wins: raising an epoch can only fence more, never admit a superseded owner).
void salvage_journal(const Paths& p, const std::string& jrnl, Salvage* sv, Lines& line) {
  FileHeader h;
  uint32_t seed = 0;
  std::string why = format::decode_header(jrnl, FileKind::kJournal, &h, &seed);
  if (!why.empty()) {
    line(at(p.journal, 0, why) + ": nothing salvaged from it");
    return;
  }
  sv->any_header = true;
  sv->max_gen = std::max(sv->max_gen, h.generation);
  if (sv->have_snap_inc && h.incarnation != sv->snap_inc) {
    line(p.journal + ": incarnation " + format::incarnation_hex(h.incarnation) +
         " differs from the snapshot's; its records are merged anyway (highest epoch wins)");
  }
  const ReplayResult rr =
      replay(jrnl, FileKind::kJournal, seed, ReplayPolicy::kLenient, &sv->state);
  const ScanResult& sr = rr.scan;
  line(p.journal + ": generation " + std::to_string(h.generation) + ", " +
       std::to_string(sr.records) + " records salvaged (" + std::to_string(rr.advances) +
       " advances, " + std::to_string(rr.adds) + " new domains) from " +
       std::to_string(sr.valid_end) + " of " + std::to_string(jrnl.size()) + " bytes");
  if (sr.end == ScanEnd::kCorrupt) {
    line(at(p.journal, sr.bad_offset, "corruption: " + sr.reason) +
         ": the rest of the journal is ignored");
  } else if (sr.end == ScanEnd::kTorn) {
    line(at(p.journal, sr.bad_offset, "torn tail: " + sr.reason) + ": cut");
  }
}

int write_synced(FileLayer& fs, const std::string& path, const std::string& bytes) {
  int err = 0;
  std::unique_ptr<File> f = fs.open_append(path, true, &err);
  if (f == nullptr) return err != 0 ? err : EIO;
  err = f->append(bytes.data(), bytes.size());
  if (err == 0) err = f->sync();
  int cerr = f->close();
  return err != 0 ? err : cerr;
}

// A new lineage holding `domains`. Both temp files durable first, then both renames and one
// directory sync. A crash between the renames leaves files of two incarnations, which open()
// refuses: run recover again.
int write_lineage(const Paths& p, FileLayer& fs, uint64_t gen,
                  const std::vector<DomainRecord>& domains, Lines& line) {
  Incarnation inc;
  int rc = format::random_incarnation(&inc);
  if (rc != 0) {
    line("cannot get random bytes for a new incarnation: " + errstr(rc));
    return rc;
  }
  uint32_t seed = 0;
  rc = write_synced(fs, p.snapshot_tmp, snapshot_bytes(inc, gen, domains));
  if (rc == 0) rc = write_synced(fs, p.journal_tmp, journal_header(inc, gen, &seed));
  if (rc == 0) rc = fs.rename(p.snapshot_tmp, p.snapshot);
  if (rc == 0) rc = fs.rename(p.journal_tmp, p.journal);
  if (rc == 0) rc = fs.sync_dir(p.dir);
  if (rc != 0) {
    line("writing the recovered state failed: " + errstr(rc) + " (run recover again)");
    return rc;
  }
  line("wrote a new state: incarnation " + format::incarnation_hex(inc) + ", generation " +
       std::to_string(gen));
  for (const auto& d : domains) {
    line("  domain " + std::to_string(d.id) + " " + d.path + ": epoch " + std::to_string(d.epoch));
  }
  return 0;
}

int recover(const Paths& p, uint64_t floor, FileLayer& fs, Lines& line) {
  if (!fs.exists(p.dir)) {
    line("no state directory " + p.dir + ": nothing to recover (use --init to create)");
    return ENOENT;
  }
  std::string snap, jrnl;
  int rs = fs.read_file(p.snapshot, &snap);
  int rj = fs.read_file(p.journal, &jrnl);
  if (rs != 0 && rs != ENOENT) {
    line(p.snapshot + ": cannot read: " + errstr(rs));
    return rs;
  }
  if (rj != 0 && rj != ENOENT) {
    line(p.journal + ": cannot read: " + errstr(rj));
    return rj;
  }
  if (rs == ENOENT && rj == ENOENT) {
    line("no state in " + p.dir + ": nothing to recover (use --init to create)");
    return ENOENT;
  }

  Salvage sv;
  if (rs == ENOENT) {
    line(p.snapshot + ": missing");
  } else {
    salvage_snapshot(p, snap, &sv, line);
  }
  if (rj == ENOENT) {
    line(p.journal + ": missing");
  } else {
    salvage_journal(p, jrnl, &sv, line);
  }
  ReplayState& s = sv.state;
  if (!s.by_id.count(0)) {
    if (s.paths.count("/")) {
      line("the path \"/\" belongs to a domain other than 0; refusing to guess");
      return EUCLEAN;
    }
    s.add(0, "/", 0);
    line("root domain 0 \"/\" was not salvaged: recreated at epoch 0 (before the floor)");
  }

  uint64_t raised = 0;
  for (auto& [id, d] : s.by_id) {
    if (d.epoch < floor) {
      d.epoch = floor;
      raised++;
    }
  }
  line("floor " + std::to_string(floor) + ": raised " + std::to_string(raised) + " of " +
       std::to_string(s.by_id.size()) + " domains");
  return write_lineage(p, fs, sv.any_header ? sv.max_gen + 1 : 1, s.sorted(), line);
}

}  // namespace

int recover_offline(const std::string& dir, uint64_t floor, FileLayer& fs, std::string* report) {
  Lines line;
  int rc = recover(Paths(dir), floor, fs, line);
  if (report != nullptr) *report = line.text;
  return rc;
}

}  // namespace fencefs::journal
