// Extended attributes. user.fencefs.* are virtual and read-only (listed with -o list_xattrs);
// trusted.fencefs.* hold the stamps in BACKING and are neither visible nor writable through the
// mount.
#include <sys/stat.h>
#include <sys/xattr.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/proc.h"
#include "fs/ops.h"

namespace fencefs::fs {
namespace {

bool is_trusted_fencefs(const char* name) {
  return strncmp(name, "trusted.fencefs", 15) == 0 && (name[15] == 0 || name[15] == '.');
}

bool reserved(const char* name) {
  return strncmp(name, "user.fencefs.", 13) == 0 || is_trusted_fencefs(name);
}

bool is_acl(const char* name) { return strncmp(name, "system.posix_acl_", 17) == 0; }

// A set or removal the daemon may not make: its own names, virtual files, and ACLs that the
// kernel would not enforce (they would hold on BACKING and not through the mount).
int refused(Fs& f, Inode& i, const char* name) {
  if (is_virtual(i) || reserved(name)) return EPERM;
  if (is_acl(name) && !f.acls_enforced()) return EOPNOTSUPP;
  // A filesystem below BACKING that keeps no ACLs refuses one natively, before any fencing.
  if (is_acl(name) &&
      getxattr(f.proc_path(i.fd).c_str(), "system.posix_acl_access", nullptr, 0) < 0 &&
      errno == EOPNOTSUPP)
    return EOPNOTSUPP;
  return 0;
}

// The kernel checked the caller's right to user.*, trusted.*, security.* and POSIX ACLs (write
// permission, capabilities, an ACL's owner or CAP_FOWNER). An ACL set by the file's owner is
// still set with the owner's credentials: whether it clears the set-group-ID bit depends on the
// caller's groups. Other system.* names (a backing filesystem's own ACLs, such as NFSv4's) the
// kernel leaves to the filesystem: only the caller's credentials, never root's, may set them.
template <typename Fn>
int as_needed(fuse_req_t req, Inode& i, const char* name, Fn call) {
  std::optional<AsCaller> as;
  struct stat st;
  const bool acl = is_acl(name), system = !acl && strncmp(name, "system.", 7) == 0;
  const bool known = (acl || system) && fstat(i.fd, &st) == 0;
  if (acl) {
    if (known && st.st_uid == fuse_req_ctx(req)->uid) as.emplace(req, 0, false, &st);
  } else if (system) {
    as.emplace(req, 0, false, known ? &st : nullptr);
  }
  if (as && !as->ok()) return EACCES;
  std::optional<ChargedTo> charged;  // as the caller already, or charged to it: a new xattr block
  if (!as) charged.emplace(req, true);
  return call() == 0 ? 0 : errno;
}

// The inspection attributes user.fencefs.* of a real inode, as this caller sees them: the domain's
// epoch and path, the file's last stamp, and the token the caller presents there (each only when
// it has a value). getxattr and listxattr both read this one list.
std::vector<std::pair<const char*, std::string>> inspection(fuse_req_t req, Fs& f, Inode& i) {
  Domain& d = f.domain_of(i);
  std::vector<std::pair<const char*, std::string>> out = {
      {"user.fencefs.epoch", std::to_string(d.epoch.load())}, {"user.fencefs.domain", d.path}};
  if (Epoch s = f.stamp_of(i)) out.emplace_back("user.fencefs.last_epoch", std::to_string(s));
  if (Epoch t = f.token_for(req, d)) out.emplace_back("user.fencefs.token", std::to_string(t));
  return out;
}

void reply_value(fuse_req_t req, const std::string& v, size_t size) {
  if (size == 0) return (void)fuse_reply_xattr(req, v.size());
  if (v.size() > size) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, v.data(), v.size());
}

}  // namespace

void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size,
                 int flags) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  if (int err = refused(f, i, name)) return (void)fuse_reply_err(req, err);
  fence::Admission a;
  Domain* d = nullptr;
  int err = admit_at(req, i, nullptr, "setxattr", &a, true, &d);
  if (err) return (void)fuse_reply_err(req, err);
  err = as_needed(req, i, name,
                  [&] { return setxattr(f.proc_path(i.fd).c_str(), name, value, size, flags); });
  if (err) return (void)fuse_reply_err(req, err);
  f.stamp(i, -1, a.token(), *d);
  fuse_reply_err(req, 0);
}

void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  if (int err = refused(f, i, name)) return (void)fuse_reply_err(req, err);
  fence::Admission a;
  Domain* d = nullptr;
  int err = admit_at(req, i, nullptr, "removexattr", &a, true, &d);
  if (err) return (void)fuse_reply_err(req, err);
  err = as_needed(req, i, name, [&] { return removexattr(f.proc_path(i.fd).c_str(), name); });
  if (err) return (void)fuse_reply_err(req, err);
  f.stamp(i, -1, a.token(), *d);
  fuse_reply_err(req, 0);
}

void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  if (strncmp(name, "user.fencefs.", 13) == 0) {
    if (is_virtual(i)) return (void)fuse_reply_err(req, ENODATA);
    for (auto& [n, v] : inspection(req, f, i))
      if (!strcmp(n, name)) return reply_value(req, v, size);
    return (void)fuse_reply_err(req, ENODATA);
  }
  if (is_virtual(i) || is_trusted_fencefs(name)) return (void)fuse_reply_err(req, ENODATA);
  std::string v(size, '\0');
  ssize_t n = getxattr(f.proc_path(i.fd).c_str(), name, size ? v.data() : nullptr, size);
  // The kernel asks for an inode's ACL before its mode bits decide, and fails the access with
  // any error but "none" (ENODATA): a filesystem below BACKING that keeps no ACLs has none.
  if (n < 0 && errno == EOPNOTSUPP && is_acl(name)) return (void)fuse_reply_err(req, ENODATA);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  if (size == 0) return (void)fuse_reply_xattr(req, static_cast<size_t>(n));
  fuse_reply_buf(req, v.data(), static_cast<size_t>(n));
}

void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Fs& f = fs(req);
  Inode& i = *f.inode(ino);
  if (is_virtual(i))
    return size ? (void)fuse_reply_buf(req, nullptr, 0) : (void)fuse_reply_xattr(req, 0);
  std::string path = f.proc_path(i.fd);
  ssize_t n = listxattr(path.c_str(), nullptr, 0);
  if (n < 0) return (void)fuse_reply_err(req, errno);
  std::string raw(static_cast<size_t>(n) + 256, '\0');
  n = listxattr(path.c_str(), raw.data(), raw.size());
  if (n < 0) return (void)fuse_reply_err(req, errno);
  std::string out;
  int admin = -1;  // asked once, and only when a trusted.* name is there to hide
  for (size_t p = 0; p < static_cast<size_t>(n);) {
    const char* nm = raw.data() + p;
    size_t len = strlen(nm);
    p += len + 1;
    if (reserved(nm)) continue;
    // The daemon lists as root; natively, trusted.* names show only to CAP_SYS_ADMIN.
    if (strncmp(nm, "trusted.", 8) == 0) {
      if (admin < 0) admin = proc::sys_admin_capable(fuse_req_ctx(req)->pid) ? 1 : 0;
      if (!admin) continue;
    }
    out.append(nm, len + 1);
  }
  // Opt-in: tools that copy xattrs (rsync -X) remove names the source lacks, and these refuse.
  if (f.opts().list_xattrs)
    for (auto& [nm, v] : inspection(req, f, i)) out.append(nm, strlen(nm) + 1);
  reply_value(req, out, size);
}

}  // namespace fencefs::fs
