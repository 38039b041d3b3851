#include "journal/replay.h"

#include <algorithm>

namespace fencefs::journal {
namespace {

using format::Record;

std::string not_allowed(const Record& r, const char* where) {
  return "record type " + std::to_string(r.type) + " is not allowed in " + where;
}

class Replayer {
 public:
  Replayer(ReplayPolicy policy, ReplayState* s, ReplayResult* out)
      : lenient_(policy == ReplayPolicy::kLenient), s_(*s), out_(*out) {}

  std::string journal_record(const Record& r) {
    switch (r.type) {
      case format::kAdvance:
        return advance(r);
      case format::kDomainAdd:
        return domain_add(r);
      default:
        return not_allowed(r, "a journal");
    }
  }

  std::string snapshot_record(const Record& r) {
    if (out_.snapshot_end) return "record after SNAPSHOT_END";
    if (r.type == format::kSnapshotEnd) {
      if (!lenient_ && r.count != states_) {
        return "SNAPSHOT_END counts " + std::to_string(r.count) + " domains but " +
               std::to_string(states_) + " precede it";
      }
      out_.snapshot_end = true;
      return "";
    }
    if (r.type != format::kDomainState) return not_allowed(r, "a snapshot");
    if (s_.by_id.count(r.id)) return "duplicate domain id " + std::to_string(r.id);
    if (s_.paths.count(r.path)) return "duplicate domain path " + r.path;
    s_.add(r.id, r.path, r.epoch);
    states_++;
    out_.adds++;
    return "";
  }

 private:
  std::string advance(const Record& r) {
    auto it = s_.by_id.find(r.id);
    if (it == s_.by_id.end()) return "ADVANCE for unknown domain id " + std::to_string(r.id);
    if (r.epoch <= it->second.epoch) {
      if (lenient_) {
        out_.skipped++;
        return "";
      }
      return "ADVANCE of domain " + std::to_string(r.id) + " to epoch " + std::to_string(r.epoch) +
             ", not above its epoch " + std::to_string(it->second.epoch);
    }
    it->second.epoch = r.epoch;
    out_.advances++;
    return "";
  }

  std::string domain_add(const Record& r) {
    auto it = s_.by_id.find(r.id);
    if (lenient_ && it != s_.by_id.end() && it->second.path == r.path) {
      out_.skipped++;  // already known (e.g. from a snapshot of another generation)
      return "";
    }
    if (it != s_.by_id.end()) return "DOMAIN_ADD of existing domain id " + std::to_string(r.id);
    if (s_.paths.count(r.path)) return "DOMAIN_ADD of existing domain path " + r.path;
    s_.add(r.id, r.path, 0);
    out_.adds++;
    return "";
  }

  const bool lenient_;
  ReplayState& s_;
  ReplayResult& out_;
  uint32_t states_ = 0;  // DOMAIN_STATE records so far
};

}  // namespace

void ReplayState::add(uint32_t id, const std::string& path, uint64_t epoch) {
  by_id[id] = DomainRecord{id, path, epoch};
  paths.insert(path);
}

std::vector<DomainRecord> ReplayState::sorted() const {
  std::vector<DomainRecord> v;
  v.reserve(by_id.size());
  for (const auto& [id, d] : by_id) v.push_back(d);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return v;
}

ReplayResult replay(std::string_view file, format::FileKind kind, uint32_t seed,
                    ReplayPolicy policy, ReplayState* state) {
  ReplayResult out;
  Replayer r(policy, state, &out);
  out.scan = format::scan(file, seed, [&](uint64_t, const Record& rec) {
    return kind == format::FileKind::kSnapshot ? r.snapshot_record(rec) : r.journal_record(rec);
  });
  return out;
}

}  // namespace fencefs::journal
