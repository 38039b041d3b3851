// The file operations the journal uses, behind an interface so tests can inject faults
// (in the manner of RocksDB's FaultInjectionTestFS).
#pragma once
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>

namespace fencefs::journal {

class File {
 public:
  virtual ~File() = default;
  // Appends all bytes or returns an errno.
  virtual int append(const void* data, size_t len) = 0;
  // fdatasync. Returns 0 or an errno; after a failure nothing may be assumed durable.
  virtual int sync() = 0;
  virtual int close() = 0;
  // Allocates the blocks up to byte `end` without changing the size, so that appends below it
  // need no free space. 0 or an errno (EOPNOTSUPP where the filesystem cannot).
  virtual int reserve(uint64_t end) { return EOPNOTSUPP; }
};

class FileLayer {
 public:
  virtual ~FileLayer() = default;
  // Whole file into *out. ENOENT when missing.
  virtual int read_file(const std::string& path, std::string* out) = 0;
  // Opens for appending; truncate=true creates or empties it. *err set on failure (nullptr
  // returned).
  virtual std::unique_ptr<File> open_append(const std::string& path, bool truncate, int* err) = 0;
  virtual int rename(const std::string& from, const std::string& to) = 0;
  virtual int sync_dir(const std::string& dir) = 0;
  virtual int remove(const std::string& path) = 0;
  virtual int mkdir(const std::string& path) = 0;  // 0 or EEXIST or errno
  virtual bool exists(const std::string& path) = 0;
};

// The real thing: POSIX calls, fdatasync, fsync of the directory.
FileLayer& posix_file_layer();

}  // namespace fencefs::journal
