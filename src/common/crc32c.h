// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as used by iSCSI, ext4 and LevelDB.
// Hardware (SSE4.2) when the CPU has it, slice-by-8 tables otherwise; both give the same values.
#pragma once
#include <cstddef>
#include <cstdint>

namespace fencefs {

// CRC32C of data[0, n) appended to a stream whose CRC32C so far is `crc`:
// crc32c_extend(crc32c(a), b) == crc32c(a followed by b). crc32c_extend(0, ...) == crc32c(...).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);

inline uint32_t crc32c(const void* data, size_t n) { return crc32c_extend(0, data, n); }

// The portable table-driven implementation (for tests and for CPUs without SSE4.2).
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t n);
// True when crc32c_extend uses the SSE4.2 instruction.
bool crc32c_hardware();

// A CRC stored next to the data it covers is masked (as in LevelDB), because the CRC of a string
// that itself contains embedded CRCs is otherwise prone to degenerate values.
inline constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;
inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta; }
inline uint32_t crc32c_unmask(uint32_t masked) {
  uint32_t rot = masked - kCrc32cMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace fencefs
