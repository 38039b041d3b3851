// Journal generation and recovery timing against the fencefs journal library
// (fencefs::journal::StateStore, src/journal/journal.h). A CMake target (build/bench/).
//
//   journal_bench generate DIR N [DOMAINS]
//       Opens (creating if missing) the state in DIR with compaction disabled, declares DOMAINS
//       extra domains (/bench1 ...) if absent, then appends N advance records round-robin over
//       them (each advance fdatasyncs: run it on tmpfs, then copy the state to the disk).
//   journal_bench recover DIR
//       Times StateStore::open(DIR) with default options (what a mount does) and prints
//       seconds, records_replayed and the recovered domain count.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "journal/journal.h"

using namespace fencefs::journal;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int generate(const std::string& dir, uint64_t n, uint32_t ndomains) {
  Options opts;
  opts.create_if_missing = true;
  opts.compact_threshold_bytes = UINT64_MAX;  // keep every record in the journal
  std::string err;
  auto store = StateStore::open(dir, opts, posix_file_layer(), &err);
  if (!store) {
    std::fprintf(stderr, "journal_bench: open %s: %s\n", dir.c_str(), err.c_str());
    return 1;
  }
  std::vector<uint32_t> ids;
  std::vector<uint64_t> epochs;
  uint32_t max_id = 0;
  for (const auto& d : store->domains()) max_id = std::max(max_id, d.id);
  for (uint32_t i = 1; i <= ndomains; i++) {
    std::string path = "/bench" + std::to_string(i);
    bool found = false;
    for (const auto& d : store->domains()) {
      if (d.path == path) {
        ids.push_back(d.id);
        epochs.push_back(d.epoch);
        found = true;
      }
    }
    if (found) continue;
    uint32_t id = ++max_id;
    int rc = store->add_domain(id, path);
    if (rc != 0) {
      std::fprintf(stderr, "journal_bench: add_domain %s: %s\n", path.c_str(), std::strerror(rc));
      return 1;
    }
    ids.push_back(id);
    epochs.push_back(0);
  }
  if (ids.empty()) {  // only the root domain
    for (const auto& d : store->domains()) {
      if (d.id == 0) {
        ids.push_back(0);
        epochs.push_back(d.epoch);
      }
    }
  }
  double t0 = now();
  for (uint64_t i = 0; i < n; i++) {
    size_t k = i % ids.size();
    int rc = store->advance(ids[k], ++epochs[k]);
    if (rc != 0) {
      std::fprintf(stderr, "journal_bench: advance #%llu: %s\n", (unsigned long long)i,
                   std::strerror(rc));
      return 1;
    }
  }
  double el = now() - t0;
  auto st = store->stats();
  std::printf("records %llu\nseconds %.6f\njournal_bytes %llu\nsnapshot_bytes %llu\n",
              (unsigned long long)n, el, (unsigned long long)st.journal_bytes,
              (unsigned long long)st.snapshot_bytes);
  return 0;
}

static int recover(const std::string& dir) {
  Options opts;  // defaults, as a mount would use them
  std::string err;
  double t0 = now();
  auto store = StateStore::open(dir, opts, posix_file_layer(), &err);
  double el = now() - t0;
  if (!store) {
    std::fprintf(stderr, "journal_bench: recover %s: %s\n", dir.c_str(), err.c_str());
    return 1;
  }
  std::printf("seconds %.6f\nrecords_replayed %llu\ndomains %zu\n", el,
              (unsigned long long)store->report().records_replayed, store->domains().size());
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "generate") == 0) {
    uint32_t nd = argc > 4 ? (uint32_t)std::strtoul(argv[4], nullptr, 10) : 16;
    return generate(argv[2], std::strtoull(argv[3], nullptr, 10), nd);
  }
  if (argc == 3 && std::strcmp(argv[1], "recover") == 0) return recover(argv[2]);
  std::fprintf(stderr, "usage: journal_bench generate DIR N [DOMAINS] | recover DIR\n");
  return 2;
}
