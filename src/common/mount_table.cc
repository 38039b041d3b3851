#include "common/mount_table.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <string_view>

namespace fencefs::common {

std::optional<bool> any_mount(const std::string& table, const std::function<bool(libmnt_fs*)>& stop,
                              std::string* error) {
  libmnt_table* tb = mnt_new_table_from_file(table.c_str());
  if (!tb) {
    *error = fmt::format("cannot read the mount table ({})", table);
    return std::nullopt;
  }
  libmnt_iter* it = mnt_new_iter(MNT_ITER_BACKWARD);
  libmnt_fs* fs = nullptr;
  bool found = false;
  while (!found && mnt_table_next_fs(tb, it, &fs) == 0) found = stop(fs);
  mnt_free_iter(it);
  mnt_unref_table(tb);
  return found;
}

bool on_user_fuse(int fd) {
  constexpr long kFuseSuperMagic = 0x65735546;  // fuse, fuseblk and virtiofs alike
  struct statfs sf;
  // A user's FUSE daemon may fail its STATFS: not knowing is not trusting.
  if (fstatfs(fd, &sf) != 0) return true;
  if (sf.f_type != kFuseSuperMagic) return false;
  struct stat st;
  if (fstat(fd, &st) != 0) return true;
  bool user = true;  // not found, or no table: not trusted
  std::string error;
  any_mount(
      "/proc/self/mountinfo",
      [&](libmnt_fs* fs) {
        if (mnt_fs_get_devno(fs) != st.st_dev) return false;
        char* uid = nullptr;
        size_t len = 0;
        // Every fuse and fuseblk mount names its user; virtiofs, which only root mounts, none.
        bool named = mnt_fs_get_option(fs, "user_id", &uid, &len) == 0 && uid;
        user = named && std::string_view(uid, len) != "0";
        return true;
      },
      &error);
  return user;
}

}  // namespace fencefs::common
