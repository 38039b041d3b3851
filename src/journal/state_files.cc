#include "journal/state_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/path.h"

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

int open_private_state_dir(const std::string& state, bool nofollow, std::string* error) {
  int dfd = open(state.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
  if (dfd < 0) {
    *error = nofollow && (errno == ELOOP || errno == ENOTDIR)
                 ? fmt::format("state directory {} is not a directory (a symbolic link?)", state)
                 : fmt::format("state directory {}: {}", state, common::errstr(errno));
    return -1;
  }
  struct stat ds {
  }, ps{};
  std::string probe = fmt::format(".owner-probe.{}", getpid());
  int pfd = -1;
  bool ok = fstat(dfd, &ds) == 0 &&
            (pfd = openat(dfd, probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                          0600)) >= 0 &&
            fstat(pfd, &ps) == 0;
  int err = errno;
  if (pfd >= 0) {
    close(pfd);
    unlinkat(dfd, probe.c_str(), 0);
  }
  if (!ok) {
    close(dfd);
    *error = fmt::format("state directory {}: {}", state, common::errstr(err));
    return -1;
  }
  if (ds.st_uid != ps.st_uid || (ds.st_mode & (S_IWGRP | S_IWOTH))) {
    close(dfd);
    *error = fmt::format(
        "state directory {} is owned by uid {} with mode {:o}; it must be this daemon's (uid {}) "
        "and writable by nobody else, or whoever may write it could make root write through a "
        "link placed there: chown {} it and chmod go-w it, or choose another state=",
        state, ds.st_uid, ds.st_mode & 07777, ps.st_uid, ps.st_uid);
    return -1;
  }
  return dfd;
}

namespace {

bool only_we_may_write(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return false;
  return (st.st_uid == geteuid() || st.st_uid == 0) && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

}  // namespace

bool state_link_acceptable(const std::string& named, const std::string& canonical,
                           const std::string& backing, std::string* error) {
  if (named == canonical) return true;
  if (!backing.empty() && common::under(named, backing)) {
    *error = fmt::format(
        "state directory {} is a symbolic link inside BACKING; fencefs follows no link there: use "
        "BACKING/.fencefs or a directory outside BACKING",
        named);
    return false;
  }
  if (!only_we_may_write(parent_dir(named))) {
    *error = fmt::format(
        "state directory {} is a symbolic link in a directory others may write (to {}); name the "
        "state directory itself",
        named, canonical);
    return false;
  }
  return true;
}

}  // namespace fencefs::journal
