// The last-epoch stamp every file mutated through the mount carries in BACKING: the epoch of its
// last accepted mutation, and its size and mtime then (so a write that bypassed fencefs shows).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fence/token.h"

namespace fencefs::fence {

// Short name and compact value: on ext4 they fit in the inode's own xattr space, leaving the
// file's 4 KiB xattr block to the user as on a plain directory.
constexpr const char* kStampXattr = "trusted.fencefs";

// A stamp written before stamps named their domain: it belongs to whichever domain holds the file.
constexpr uint32_t kAnyDomain = ~0u;

struct Stamp {
  Epoch epoch = 0;
  uint32_t domain = kAnyDomain;  // id of the domain whose epoch `epoch` is
  bool has_size = false;
  uint64_t size = 0;
  bool has_mtime = false;
  int64_t mtime_sec = 0;
  int64_t mtime_nsec = 0;
};

// "EPOCH SIZE SEC.NSEC dID", e.g. "7 4096 1764680000.123456789 d3": an epoch is evidence only
// in the domain that issued it, so the stamp names that domain. Older stamps end after the mtime.
std::string encode_stamp(Epoch epoch, uint64_t size, int64_t mtime_sec, int64_t mtime_nsec,
                         uint32_t domain);
// nullopt when malformed. Reads every older form (no domain, no mtime, epoch alone).
std::optional<Stamp> decode_stamp(std::string_view v);

}  // namespace fencefs::fence
