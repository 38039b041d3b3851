// This mount namespace's mount table, read with libmount (which decodes the escaped paths).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fencefs::daemon {

// Whether something is mounted at the canonical path DIR in TABLE (this mount namespace's by
// default; /proc/PID/mountinfo for another process'); nullopt (with *error) when the table
// cannot be read.
std::optional<bool> is_mountpoint(const std::string& dir, std::string* error,
                                  const std::string& table = "/proc/self/mountinfo");
// The backings (sources) of this mount namespace's fencefs mounts; empty when the table cannot be
// read.
std::vector<std::string> fencefs_backings();
// This daemon's mount: its device, and its unique id where the kernel has one (Linux 6.8+,
// STATX_MNT_ID_UNIQUE), which no later mount is given; a device number is reused at once.
struct MountId {
  dev_t dev = 0;
  uint64_t unique = 0;  // 0: unknown
};
// This daemon's mount at the canonical path DIR of BACKING: the newest fuse.fencefs mount there
// of BACKING whose user_id is this process' uid, so never a mount someone else made at that path.
// The device from the mount table (stat(DIR) would wait for an INIT not yet answered), the unique
// id from statx without a request. nullopt with *error when there is none.
std::optional<MountId> our_mount(const std::string& dir, const std::string& backing,
                                 std::string* error);
// Detaches the mount the canonical path DIR leads to if it is this daemon's (as for our_mount,
// and ID): one whose FUSE connection ended, which libfuse leaves in place (it takes the device's
// POLLERR for an unmount). false with *error when it did not.
bool detach_dead_mount(const std::string& dir, const std::string& backing, const MountId& id,
                       std::string* error);
// A killed daemon leaves its mount in place, dead (ENOTCONN), and the path unusable until it is
// removed. Whether the mount the canonical path DIR leads to is such a mount: fencefs, of
// BACKING, made by this user, its connection ended (probed in a child, for at most 10 s). false
// with *error when it is not, or that cannot be told.
bool dead_mount_at(const std::string& dir, const std::string& backing, std::string* error);
// Detaches that mount after checking it again; false with *error when it did not.
bool remove_dead_mount(const std::string& dir, const std::string& backing, std::string* error);
// After the kernel ended the connection of this daemon's mount at DIR (ID as our_mount found it
// at start, else NO_ID says why not): whether it left the mount in place, dead. An abort
// (ABORTED) always does; `umount -f` ends the connection first and then unmounts unless the mount
// is busy, and the kernel's request timeout never unmounts: the mount is waited for to leave the
// table, up to 10 s. If it stays, says so and detaches it; the daemon then exits 1, so that a
// service manager starts it again.
bool left_dead_mount(const std::string& dir, const std::string& backing,
                     const std::optional<MountId>& id, const std::string& no_id, bool aborted);
// Sets the read-ahead (KiB) of this daemon's mount, of device DEV (our_mount), through its
// backing device info in sysfs (root only). Before INIT is answered: the kernel then lowers it to
// the reply's max_readahead, never raises it. false with *error when it could not.
bool set_readahead(dev_t dev, unsigned kib, std::string* error);
// set_readahead to readahead= (`asked`; 0 leaves the kernel's), else to kDefaultReadaheadKib; why
// not (NO_ID when ID is unknown) in the log when it could not, a warning when asked.
constexpr unsigned kDefaultReadaheadKib = 1024;
void apply_readahead(const std::optional<MountId>& id, const std::string& no_id,
                     std::optional<unsigned> asked);
// Whether the directory DIR holds any entry besides . and ..; nullopt (with *error) when it
// cannot be read.
std::optional<bool> dir_has_entries(const std::string& dir, std::string* error);

}  // namespace fencefs::daemon
