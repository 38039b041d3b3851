#include "journal/state_files.h"

namespace fencefs::journal {
namespace {

std::string strip_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

std::string parent_dir(const std::string& dir) {
  size_t slash = dir.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return dir.substr(0, slash);
}

Paths::Paths(const std::string& d)
    : dir(strip_slashes(d)),
      snapshot(dir + "/snapshot"),
      journal(dir + "/journal"),
      snapshot_tmp(dir + "/snapshot.tmp"),
      journal_tmp(dir + "/journal.tmp") {}

std::string at(const std::string& file, uint64_t offset, const std::string& reason) {
  return file + ": " + reason + " at byte " + std::to_string(offset);
}

std::string snapshot_bytes(const format::Incarnation& inc, uint64_t generation,
                           const std::vector<DomainRecord>& domains) {
  format::FileHeader h;
  h.incarnation = inc;
  h.generation = generation;
  uint32_t chain = 0;
  std::string out = format::encode_header(format::FileKind::kSnapshot, h, &chain);
  for (const auto& d : domains) {
    format::Record r;
    r.type = format::kDomainState;
    r.id = d.id;
    r.epoch = d.epoch;
    r.path = d.path;
    format::append_record(&out, &chain, r);
  }
  format::Record end;
  end.type = format::kSnapshotEnd;
  end.count = static_cast<uint32_t>(domains.size());
  format::append_record(&out, &chain, end);
  return out;
}

std::string journal_header(const format::Incarnation& inc, uint64_t generation, uint32_t* chain) {
  format::FileHeader h;
  h.incarnation = inc;
  h.generation = generation;
  return format::encode_header(format::FileKind::kJournal, h, chain);
}

}  // namespace fencefs::journal
