#include "fs/node_table.h"

#include <cstdlib>
#include <new>
#include <stdexcept>

namespace fencefs::fs {

NodeTable::NodeTable()
    // calloc: a large zeroed allocation costs no memory until a chunk pointer is stored.
    : chunks_(static_cast<std::atomic<Slot*>*>(calloc(kMaxChunks, sizeof(std::atomic<Slot*>)))) {
  if (!chunks_) throw std::bad_alloc();
  chunks_[0].store(new Slot[kChunkSize], std::memory_order_release);
}

NodeTable::~NodeTable() {
  for (uint32_t c = 0; c < kMaxChunks; c++) delete[] chunks_[c].load();
  free(chunks_);
}

NodeTable::Slot* NodeTable::slot(uint32_t index) const {
  if ((index >> kChunkBits) >= kMaxChunks) return nullptr;
  Slot* chunk = chunks_[index >> kChunkBits].load(std::memory_order_acquire);
  return chunk ? &chunk[index & (kChunkSize - 1)] : nullptr;
}

void NodeTable::set_fixed(uint64_t id, void* p) {
  if (id == 0 || id >= kFirstDynamic) throw std::logic_error("not a fixed node id");
  slot(static_cast<uint32_t>(id))->ptr.store(p, std::memory_order_release);
}

uint64_t NodeTable::add(void* p) {
  common::MutexLock lk(mu_);
  uint32_t index;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
  } else {
    if (next_ >= kMaxChunks * kChunkSize) throw std::length_error("node table full");
    index = next_++;
    uint32_t c = index >> kChunkBits;
    if (!chunks_[c].load(std::memory_order_relaxed))
      chunks_[c].store(new Slot[kChunkSize], std::memory_order_release);
  }
  Slot* s = slot(index);
  // Generation 0 is never handed out: an id with a zero high half can only be a fixed one.
  uint32_t gen = s->gen.load(std::memory_order_relaxed);
  if (gen == 0) s->gen.store(gen = 1, std::memory_order_relaxed);
  s->ptr.store(p, std::memory_order_release);
  live_.fetch_add(1, std::memory_order_relaxed);
  return (static_cast<uint64_t>(gen) << 32) | index;
}

void* NodeTable::get(uint64_t id) const {
  uint32_t index = static_cast<uint32_t>(id);
  uint32_t gen = static_cast<uint32_t>(id >> 32);
  if (index == 0 || (gen == 0) != (index < kFirstDynamic)) return nullptr;
  Slot* s = slot(index);
  if (!s) return nullptr;
  void* p = s->ptr.load(std::memory_order_acquire);
  if (gen != 0 && s->gen.load(std::memory_order_acquire) != gen) return nullptr;
  return p;
}

void NodeTable::remove(uint64_t id) {
  uint32_t index = static_cast<uint32_t>(id);
  uint32_t gen = static_cast<uint32_t>(id >> 32);
  if (gen == 0 || index < kFirstDynamic) return;
  common::MutexLock lk(mu_);
  Slot* s = slot(index);
  if (!s || s->gen.load(std::memory_order_relaxed) != gen || !s->ptr.load()) return;
  s->ptr.store(nullptr, std::memory_order_release);
  // Bump now, so the old id is dead even before the slot is reused.
  uint32_t next = gen + 1;
  s->gen.store(next == 0 ? 1 : next, std::memory_order_release);
  free_.push_back(index);
  live_.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace fencefs::fs
