/* fencefs public ioctl: rebind one open file to a fence token.
 *
 *   struct fencefs_token t = {.epoch = 8};           // or a signed token: .signature = hex
 *   if (ioctl(fd, FENCEFS_IOC_SET_TOKEN, &t) != 0) perror("fencefs token");
 *
 * Every later write, truncate, fallocate or copy through fd presents t.epoch. The same authority
 * rules as `bind` apply: the caller is in the mount's issuer set, or the token is signed with the
 * mount's key (HMAC-SHA256, see `fencectl sign`). Errors: EACCES (not authorised), EINVAL
 * (malformed), ERANGE (more than max_jump above the epoch), ESTALE (the handle was already refused
 * as stale: open the file again), ENOTTY (not a file on a fencefs mount).
 */
#ifndef FENCEFS_IOCTL_H
#define FENCEFS_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

struct fencefs_token {
  __u64 epoch;        /* 1 .. 9223372036854775807 */
  char signature[64]; /* 64 lowercase hex digits of the HMAC, or all zero when unsigned */
};

#define FENCEFS_IOC_SET_TOKEN _IOW('F', 0x01, struct fencefs_token)

/* Advance the epoch of the domain holding fd (a file or a directory, e.g. the domain's root) to
 * t.epoch, durably, as `fencectl advance` does. Same authority rules; .signature may hold a signed
 * token. Unlike writes to .fencefs/ctl, which the kernel serialises per file, advances through
 * this ioctl run in parallel, so concurrent advances of different domains share one fdatasync.
 * Errors: ESTALE (lower than the epoch), ERANGE (beyond max_jump), EACCES, EINVAL, EIO. */
#define FENCEFS_IOC_ADVANCE _IOW('F', 0x02, struct fencefs_token)

/* Acquire the domain holding fd (a directory, typically the domain's root): make .epoch the
 * domain's epoch in one durable journal record, only if it is above the current epoch; with
 * .epoch = 0 the daemon issues epoch + 1 itself (the resource is the issuer). On success .epoch
 * holds the epoch acquired: every earlier holder is revoked. Issuers only.
 * Errors: ESTALE (.epoch not above the domain's epoch: the issuer is behind the resource),
 * ERANGE (beyond max_jump), EACCES, EINVAL, EIO (the journal), EUCLEAN (the state was rolled
 * back: files carry a higher epoch than the domain's). */
struct fencefs_acquire {
  __u64 epoch;    /* in: the token to acquire, or 0 to be issued one; out: the epoch acquired */
  __u32 flags;    /* FENCEFS_ACQUIRE_* */
  __u32 reserved; /* zero */
};
#define FENCEFS_ACQUIRE_BIND 0x1   /* also bind the caller and its descendants to the epoch */
#define FENCEFS_ACQUIRE_RESYNC 0x2 /* audited as an issuer's resync after a rollback */
#define FENCEFS_IOC_ACQUIRE _IOWR('F', 0x03, struct fencefs_acquire)

/* Bind the calling process and its descendants to t for the domain holding fd, as
 * `bind DOMAIN TOKEN` on .fencefs/ctl does, without going through the shared control file.
 * Errors: EACCES, EINVAL, ERANGE. */
#define FENCEFS_IOC_BIND _IOW('F', 0x04, struct fencefs_token)

#endif
