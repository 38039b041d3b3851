// fencectl's exit status, one table for every subcommand. fencectl's own failures use a reserved
// range (200-215) that wrapped commands rarely return: 0-2, 124-127 and 128+signal stay CMD's, and
// `fencectl run` passes CMD's status through unchanged.
#pragma once
#include <cerrno>

namespace fencefs::cli::exit_code {

constexpr int kOk = 0;
// `verify` only: findings (1) and could not check (2), as documented since its first release.
constexpr int kVerifyFindings = 1;
constexpr int kVerifyCannotCheck = 2;

constexpr int kUsage = 200;         // bad command line (unknown option, missing value)
constexpr int kStale = 201;         // token lower than the domain's epoch (ESTALE)
constexpr int kTooFar = 202;        // token beyond max_jump (ERANGE)
constexpr int kUnauthorised = 203;  // caller may not present or issue that token (EACCES/EPERM)
constexpr int kMalformed = 204;     // token or command refused as malformed (EINVAL)
constexpr int kUnreachable = 205;   // no fencefs daemon at the mount (not mounted, daemon gone)
constexpr int kJournalIo = 206;     // the daemon could not make the epoch durable (EIO)
constexpr int kLockTimeout = 207;   // lock not acquired within --wait
constexpr int kLeaseLost = 208;     // the lease expired or was revoked while CMD ran
constexpr int kIssuerBehind = 209;  // the issuer's counter is at or below the resource's epoch
constexpr int kRollback = 210;      // the resource detected a rolled-back state (EIO, rollback)
constexpr int kLockService = 211;   // the lock service (etcd) is unreachable or failed
constexpr int kExecFailed = 212;    // CMD could not be started
constexpr int kFailed = 215;        // any other failure of fencectl itself (message says why)

// The status for a refusal the daemon gave as an errno.
inline int from_errno(int err) {
  switch (err) {
    case 0:
      return kOk;
    case ESTALE:
      return kStale;
    case ERANGE:
      return kTooFar;
    case EACCES:
    case EPERM:
      return kUnauthorised;
    case EINVAL:
      return kMalformed;
    case ENOTCONN:
    case ENOENT:
    case ENOTTY:  // the ioctl reached something that is not a fencefs daemon
    case ENODEV:
      return kUnreachable;
    case EIO:
      return kJournalIo;
    case EUCLEAN:
      return kRollback;
    default:
      return kFailed;
  }
}

}  // namespace fencefs::cli::exit_code
