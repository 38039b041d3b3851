// `domain add`: one inode belongs to one domain, so a directory whose files have hard links
// outside it cannot become a domain; the scan that checks it also gives stamps written before
// stamps named their domain the name of the domain they were written in.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "common/error.h"
#include "common/log.h"
#include "fs/fs.h"

namespace fencefs::fs {
namespace {

struct Links {
  nlink_t seen = 0;  // names found inside the new domain
  nlink_t nlink = 0;
  std::string path;  // the first of them
};

struct Scan {
  fence::DomainTable& domains;
  dev_t dev;       // of the new domain's root: a file system mounted below is wholly inside it
  uint32_t owner;  // the domain the scanned files are in until the declaration
  bool stamps;
  std::map<std::pair<dev_t, ino_t>, Links> links;
  std::vector<std::pair<dev_t, ino_t>> restamped;
  int err = 0;
};

// A stamp without a domain was written in the domain holding the file: `owner`. Say so, before
// the file changes domain and that stamp would be taken as the new domain's.
void name_stamp_domain(Scan& sc, int dirfd, const char* name, const struct stat& st) {
  int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  char buf[128];
  ssize_t n = getxattr(proc.c_str(), fence::kStampXattr, buf, sizeof buf);
  if (n > 0) {
    auto s = fence::decode_stamp(std::string_view(buf, static_cast<size_t>(n)));
    if (s && s->domain == fence::kAnyDomain && s->has_mtime) {
      std::string v = fence::encode_stamp(s->epoch, s->size, s->mtime_sec, s->mtime_nsec, sc.owner);
      if (setxattr(proc.c_str(), fence::kStampXattr, v.data(), v.size(), 0) == 0)
        sc.restamped.emplace_back(st.st_dev, st.st_ino);
    }
  }
  ::close(fd);
}

// Walks the directory dfd (owned) named rel, skipping directories that root other domains.
void walk(Scan& sc, int dfd, const std::string& rel) {
  DIR* dp = fdopendir(dfd);
  if (!dp) {
    sc.err = errno;
    ::close(dfd);
    return;
  }
  while (dirent* e = readdir(dp)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    struct stat st;
    if (fstatat(dirfd(dp), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string child = rel + "/" + e->d_name;
    if (S_ISDIR(st.st_mode)) {
      // Hard links never cross file systems; the mount itself may sit below BACKING.
      if (st.st_dev != sc.dev || sc.domains.by_root_inode(st.st_dev, st.st_ino)) continue;
      int cfd = openat(dirfd(dp), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd < 0) {
        sc.err = errno;
        continue;
      }
      walk(sc, cfd, child);
      continue;
    }
    if (st.st_nlink > 1) {
      Links& l = sc.links[{st.st_dev, st.st_ino}];
      l.seen++;
      l.nlink = st.st_nlink;
      if (l.path.empty()) l.path = child;
    }
    if (sc.stamps && S_ISREG(st.st_mode)) name_stamp_domain(sc, dirfd(dp), e->d_name, st);
  }
  closedir(dp);
}

}  // namespace

int Fs::declare_domain(const std::string& rel, std::string* why) {
  fence::DomainTable& table = fence_.domains();
  if (rel == "/" || rel.rfind("/.fencefs", 0) == 0) {
    *why = fmt::format("{} cannot be declared a domain", rel);
    return EINVAL;
  }
  std::vector<fence::PlaceStep> place;
  int fd = fence::resolve_place(root_.fd, rel, &place);
  if (fd < 0) {
    *why = fmt::format("{} is not a directory of this mount: {}", rel, common::errstr(-fd));
    return EINVAL;
  }
  int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int open_err = errno;
  ::close(fd);
  if (dfd < 0) {
    *why = fmt::format("cannot open {}: {}", rel, common::errstr(open_err));
    return open_err;
  }
  // Nothing is admitted in the domain the tree is carved out of while its tree is scanned and
  // split: no link or rename can cross the new boundary between the check and the declaration.
  Domain* owner = nullptr;
  auto lk = fence_.quiesce_owner(place, &owner);
  Scan sc{table, place.back().dev, owner->id, opts_.stamps, {}, {}, 0};
  walk(sc, dfd, rel);
  if (sc.err) {
    *why = fmt::format("cannot scan {}: {}", rel, common::errstr(sc.err));
    return sc.err;
  }
  {
    // Cached stamps of the files whose stamp now names its domain: read again when needed.
    common::MutexLock tl(table_mu_);
    for (auto& [dev, ino] : sc.restamped) {
      auto it = table_.find({ino, dev});
      if (it == table_.end()) continue;
      common::MutexLock il(inode_mutex(it->second));
      it->second.stamp.store(kStampUnknown, std::memory_order_release);
    }
  }
  std::vector<std::string> crossing;
  for (auto& [id, l] : sc.links)
    if (l.seen < l.nlink)
      crossing.push_back(fmt::format("{} ({} of {} links inside)", l.path, l.seen, l.nlink));
  if (!crossing.empty()) {
    std::string list;
    for (size_t k = 0; k < crossing.size() && k < 20; k++) list += "\n  " + crossing[k];
    if (crossing.size() > 20) list += fmt::format("\n  and {} more", crossing.size() - 20);
    *why = fmt::format(
        "{} has {} file(s) with hard links outside it; a file belongs to one domain: remove the "
        "outside links (or copy the files) first:{}",
        rel, crossing.size(), list);
    return EXDEV;
  }
  int err = fence_.add_domain(rel, std::move(place), why);
  if (!err) log::info("{}", *why);
  return err;
}

}  // namespace fencefs::fs
