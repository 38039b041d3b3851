#include "daemon/mounts.h"

#include <dirent.h>
#include <fmt/format.h>
#include <libmount/libmount.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace fencefs::daemon {

std::optional<bool> is_mountpoint(const std::string& dir, std::string* error,
                                  const std::string& table) {
  libmnt_table* tb = mnt_new_table_from_file(table.c_str());
  if (!tb) {
    *error = fmt::format("cannot read the mount table ({})", table);
    return std::nullopt;
  }
  libmnt_iter* it = mnt_new_iter(MNT_ITER_FORWARD);
  libmnt_fs* fs = nullptr;
  bool found = false;
  while (!found && mnt_table_next_fs(tb, it, &fs) == 0) {
    const char* target = mnt_fs_get_target(fs);
    found = target && dir == target;
  }
  mnt_free_iter(it);
  mnt_unref_table(tb);
  return found;
}

std::optional<bool> dir_has_entries(const std::string& dir, std::string* error) {
  DIR* d = opendir(dir.c_str());
  if (!d) {
    *error = fmt::format("{}: {}", dir, common::errstr(errno));
    return std::nullopt;
  }
  bool any = false;
  while (dirent* e = readdir(d)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
      any = true;
      break;
    }
  }
  closedir(d);
  return any;
}

}  // namespace fencefs::daemon
