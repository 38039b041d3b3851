// FUSE requests counted by opcode where the daemon dispatches them (the operations table), for
// the metrics: the kernel sends one request per call, so these show what a workload costs.
#pragma once
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <cstdint>
#include <string>

namespace fencefs::fs::op_stats {

// `base` with every handler replaced by one that counts its request (a relaxed atomic per
// opcode), then calls the original. The counters are process-wide; call this once per process.
// Requests libfuse answers itself (INTERRUPT, opcodes with no handler) are not counted.
fuse_lowlevel_ops counted(const fuse_lowlevel_ops& base);

// Requests counted so far for a handler name (e.g. "write", "batch_forget"); 0 if unknown.
uint64_t count(const std::string& op);

// Prometheus text: fencefs_fuse_requests_total{op="..."} for every handler `base` served.
std::string render();

}  // namespace fencefs::fs::op_stats
