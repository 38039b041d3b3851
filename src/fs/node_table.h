// FUSE node ids for inodes: generation-checked slot indices, so an id reveals no daemon address
// and a stale or unknown id is recognised (nullptr) instead of being dereferenced.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/mutex.h"

namespace fencefs::fs {

class NodeTable {
 public:
  // Ids below kFirstDynamic are fixed (1 is FUSE's root); add() never returns them.
  static constexpr uint32_t kFirstDynamic = 16;

  NodeTable();
  ~NodeTable();
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;

  // Registers a fixed id (< kFirstDynamic, not 0) for p.
  void set_fixed(uint64_t id, void* p);
  // A fresh id for p: (generation << 32) | slot. Never 0, never a fixed id.
  uint64_t add(void* p);
  // The object of a live id, nullptr for an unknown, stale or forged one. Lock-free.
  void* get(uint64_t id) const;
  // Frees the id; later get(id) returns nullptr, and the slot's next id differs.
  void remove(uint64_t id);
  size_t size() const { return live_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint32_t kChunkBits = 12;
  static constexpr uint32_t kChunkSize = 1u << kChunkBits;
  static constexpr uint32_t kMaxChunks = 1u << 16;  // 2^28 slots
  struct Slot {
    std::atomic<void*> ptr{nullptr};
    std::atomic<uint32_t> gen{0};
  };
  Slot* slot(uint32_t index) const;

  std::atomic<Slot*>* chunks_;  // kMaxChunks entries (zero pages until used); chunks never move
  common::Mutex mu_;            // add/remove
  std::vector<uint32_t> free_ GUARDED_BY(mu_);
  uint32_t next_ GUARDED_BY(mu_) = kFirstDynamic;
  std::atomic<size_t> live_{0};
};

}  // namespace fencefs::fs
