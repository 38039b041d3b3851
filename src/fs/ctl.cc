// The virtual directory MOUNTPOINT/.fencefs: `ctl` takes commands (one per write), `status` is a
// JSON snapshot of domains and bindings, `metrics` is Prometheus text.
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/log.h"
#include "common/proc.h"
#include "ctl/protocol.h"
#include "fencefs/ioctl.h"
#include "fs/ops.h"
#include "fs/report.h"

namespace fencefs::fs {
namespace {

constexpr ino_t kCtlDirIno = 0x7ffffffffffff000;

std::string token_str(const fence::TokenText& t) {
  return t.signature.empty() ? std::to_string(t.epoch)
                             : std::to_string(t.epoch) + "." + t.signature.substr(0, 8) + "…";
}

// Refusals and events of the control file go through the fence, like every other decision.
int refuse_ctl(Fs& f, const fence::Caller& c, const char* op, fence::Reason r, Domain* d,
               const std::string& domain, const std::string& token, int err, std::string why) {
  return f.fence().refuse(c, fence::Subject{op, d, domain, token}, r, err, std::move(why));
}

void note_ctl(Fs& f, const fence::Caller& c, const char* op, const char* decision, Domain* d,
              const std::string& domain, const std::string& token, std::string message) {
  f.fence().note(c, fence::Subject{op, d, domain, token}, decision, std::move(message));
}

std::string bind_failure(int err) {
  return err == EAGAIN ? "cannot tell the caller's running jobs from later ones now (no thread "
                         "could be made); try again"
                       : "caller vanished";
}

int execute(fuse_req_t req, const ctl::Command& cmd, bool opened_by_issuer, std::string* reply) {
  Fs& f = fs(req);
  fence::Caller c = f.caller(req);
  Domain* d = f.fence().domains().by_path(cmd.domain);
  std::string tok = cmd.verb == ctl::Verb::Bind || cmd.verb == ctl::Verb::Advance
                        ? token_str(cmd.token)
                        : std::string();
  const char* op = cmd.verb == ctl::Verb::Bind      ? "bind"
                   : cmd.verb == ctl::Verb::Unbind  ? "unbind"
                   : cmd.verb == ctl::Verb::Advance ? "advance"
                                                    : "domain_add";
  if (!d && cmd.verb != ctl::Verb::DomainAdd) {
    *reply = fmt::format("unknown domain {} (declare it with `fencectl domain add`)", cmd.domain);
    return refuse_ctl(f, c, op, fence::Reason::Malformed, nullptr, cmd.domain, tok, EINVAL, *reply);
  }
  std::string why;
  int err = 0;
  switch (cmd.verb) {
    case ctl::Verb::Bind:
      if ((err = f.fence().authorize(c, *d, cmd.token, false, &why, opened_by_issuer)))
        return *reply = why,
               refuse_ctl(f, c, op, fence::Reason::Unauthorised, d, cmd.domain, tok, err, why);
      if (auto dec = f.fence().decide(fence::RequestKind::Bind, *d, cmd.token.epoch); dec.refused())
        return *reply = dec.message, f.fence().refuse(c, {op, d, cmd.domain, tok}, std::move(dec));
      if ((err = f.bindings().bind(c.pid, d->id, cmd.token.epoch))) {
        *reply = bind_failure(err);
        return err;
      }
      *reply = fmt::format("bound pid {} to token {} for domain {} (epoch {})", c.pid,
                           cmd.token.epoch, d->path, d->epoch.load());
      note_ctl(f, c, op, "bound", d, cmd.domain, tok, *reply);
      return 0;
    case ctl::Verb::Unbind:
      // Only a binding removed is recorded: any user may write `unbind` as often as it likes, and
      // a record per no-op would flood the audit trail.
      if (int e = f.bindings().unbind(c.pid, d->id); e == ENOENT) {
        *reply = fmt::format("pid {} had no binding for domain {}", c.pid, d->path);
        return 0;
      } else if (e) {
        *reply = bind_failure(e);
        return e;
      }
      *reply = fmt::format("unbound pid {} for domain {}", c.pid, d->path);
      note_ctl(f, c, op, "unbound", d, cmd.domain, "", *reply);
      return 0;
    case ctl::Verb::Advance:
      if ((err = f.fence().authorize(c, *d, cmd.token, cmd.force, &why, opened_by_issuer)))
        return *reply = why,
               refuse_ctl(f, c, op, fence::Reason::Unauthorised, d, cmd.domain, tok, err, why);
      err = f.fence().advance(*d, cmd.token.epoch, cmd.force, c, reply);
      return err;
    case ctl::Verb::DomainAdd: {
      fence::TokenText none;
      if ((err = f.fence().authorize(c, *f.fence().domains().root(), none, true, &why,
                                     opened_by_issuer)))
        return *reply = why,
               refuse_ctl(f, c, op, fence::Reason::Unauthorised, nullptr, cmd.domain, "", err, why);
      err = f.declare_domain(cmd.domain, reply);
      if (err)
        return refuse_ctl(f, c, op, err == EIO ? fence::Reason::Io : fence::Reason::Malformed,
                          nullptr, cmd.domain, "", err, *reply);
      note_ctl(f, c, op, "declared", f.fence().domains().by_path(cmd.domain), cmd.domain, "",
               *reply);
      return 0;
    }
  }
  return EINVAL;
}

}  // namespace

void Fs::fill_virtual(fuse_ino_t ino, struct stat* st) {
  memset(st, 0, sizeof *st);
  Inode* i = inode(ino);
  st->st_nlink = 1;
  st->st_uid = 0;
  st->st_gid = 0;
  auto now = std::chrono::system_clock::now().time_since_epoch();
  st->st_mtim.tv_sec = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  st->st_atim = st->st_ctim = st->st_mtim;
  switch (i->kind) {
    case Kind::CtlDir:
      st->st_mode = S_IFDIR | 0755;
      st->st_nlink = 2;
      st->st_ino = kCtlDirIno;
      break;
    case Kind::CtlFile:
      st->st_mode = S_IFREG | 0666;  // anyone may try; each command checks its authority
      st->st_ino = kCtlDirIno + 1;
      break;
    case Kind::StatusFile:
      st->st_mode = S_IFREG | 0444;
      st->st_ino = kCtlDirIno + 2;
      break;
    case Kind::MetricsFile:
      st->st_mode = S_IFREG | 0444;
      st->st_ino = kCtlDirIno + 3;
      break;
    case Kind::Real:
      break;
  }
}

void ctl_lookup(fuse_req_t req, Inode& parent, const char* name) {
  Fs& f = fs(req);
  Inode* target = nullptr;
  if (parent.kind == Kind::Real) {
    target = &f.ctl_dir;  // ".fencefs" at the root
  } else if (parent.kind == Kind::CtlDir) {
    if (!strcmp(name, "ctl")) target = &f.ctl_file;
    if (!strcmp(name, "status")) target = &f.status_file;
    if (!strcmp(name, "metrics")) target = &f.metrics_file;
  }
  if (!target) return (void)fuse_reply_err(req, parent.kind == Kind::CtlDir ? ENOENT : ENOTDIR);
  fuse_entry_param e;
  memset(&e, 0, sizeof e);
  e.ino = f.ino_of(target);
  e.entry_timeout = f.opts().timeout;
  e.attr_timeout = 0;
  f.fill_virtual(e.ino, &e.attr);
  fuse_reply_entry(req, &e);
}

void ctl_open(fuse_req_t req, Inode& i, fuse_file_info* fi) {
  Fs& f = fs(req);
  if (i.kind == Kind::CtlDir) return (void)fuse_reply_err(req, EISDIR);
  bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;
  if (writing && i.kind != Kind::CtlFile) return (void)fuse_reply_err(req, EACCES);
  auto* h = new Handle;
  h->inode = &i;
  h->writable = writing;
  if (i.kind == Kind::StatusFile) h->content = render_status_json(f);
  if (i.kind == Kind::MetricsFile) h->content = render_metrics(f);
  if (i.kind == Kind::CtlFile)
    h->content =
        "fencefs control file: write one command per write(2):\n"
        "  bind DOMAIN TOKEN | unbind DOMAIN | advance DOMAIN TOKEN [force] | domain add DOMAIN\n";
  // The page stays with the handle until it is closed: charged to the caller, so that opens held
  // by one user cannot make the daemon keep pages without bound.
  h->charged_uid = fuse_req_ctx(req)->uid;
  // A set-uid program may be handed a descriptor to write to (its output): an issuer's authority
  // goes only into a file an issuer opened.
  const bool issuer = f.fence().is_issuer(f.caller(req));
  if (i.kind == Kind::CtlFile) h->opened_by_issuer = issuer;
  // Users filling the shared pool with status pages never keep an issuer, or a holder of a signed
  // token, from the control file.
  h->page_shared_exempt = issuer || i.kind == Kind::CtlFile;
  if (int err = f.pages().take(h->charged_uid, h->content.size(), &h->page_charge,
                               h->page_shared_exempt)) {
    delete h;
    return (void)fuse_reply_err(req, err);
  }
  f.opened(h);
  fi->fh = reinterpret_cast<uint64_t>(h);
  fi->direct_io = 1;
  fi->nonseekable = 0;
  if (fuse_reply_open(req, fi) == -ENOENT) f.close_handle(h);
}

void ctl_read(fuse_req_t req, Handle& h, size_t size, off_t off) {
  std::string part;
  {
    std::lock_guard lk(h.content_mu);  // a concurrent ctl write replaces it
    if (off >= h.content_base) off -= h.content_base;
    if (off >= 0 && static_cast<size_t>(off) < h.content.size())
      part = h.content.substr(static_cast<size_t>(off), size);
  }
  fuse_reply_buf(req, part.data(), part.size());
}

static void set_content(Handle& h, std::string text, off_t base) {
  std::lock_guard lk(h.content_mu);
  h.content = std::move(text);
  h.content_base = base;
}

void ctl_write(fuse_req_t req, Handle& h, const char* buf, size_t size, off_t off) {
  Fs& f = fs(req);
  if (h.inode->kind != Kind::CtlFile) return (void)fuse_reply_err(req, EACCES);
  // A refused write leaves the file offset where it was; an accepted one moves it past the command.
  ctl::ParseResult p = ctl::parse_command(std::string_view(buf, size));
  if (!p.ok) {
    set_content(h, "error: " + p.error + "\n", off);
    refuse_ctl(f, f.caller(req), "ctl", fence::Reason::Malformed, nullptr, "", "", EINVAL, p.error);
    return (void)fuse_reply_err(req, EINVAL);
  }
  std::string reply;
  int err = execute(req, p.command, h.opened_by_issuer, &reply);
  set_content(h, (err ? "error: " : "ok: ") + reply + "\n",
              err ? off : off + static_cast<off_t>(size));
  if (err) return (void)fuse_reply_err(req, err);
  fuse_reply_write(req, size);
}

void ctl_readdir(fuse_req_t req, size_t size, off_t off, bool plus) {
  Fs& f = fs(req);
  struct Ent {
    const char* name;
    Inode* i;
  } ents[] = {{".", &f.ctl_dir},
              {"..", &f.root()},
              {"ctl", &f.ctl_file},
              {"status", &f.status_file},
              {"metrics", &f.metrics_file}};
  std::string buf(size, '\0');
  size_t used = 0;
  for (off_t k = off; k < static_cast<off_t>(std::size(ents)); k++) {
    struct stat st;
    memset(&st, 0, sizeof st);
    if (ents[k].i->kind != Kind::Real)
      f.fill_virtual(f.ino_of(ents[k].i), &st);
    else
      st.st_mode = S_IFDIR, st.st_ino = 1;
    size_t n;
    if (plus) {
      fuse_entry_param e;
      memset(&e, 0, sizeof e);
      e.attr = st;
      bool real = k >= 2;  // . and .. are not looked up
      if (real) e.ino = f.ino_of(ents[k].i);
      n = fuse_add_direntry_plus(req, buf.data() + used, size - used, ents[k].name, &e, k + 1);
    } else {
      n = fuse_add_direntry(req, buf.data() + used, size - used, ents[k].name, &st, k + 1);
    }
    if (n > size - used) break;
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

namespace {

// The token carried by a fencefs_token ioctl argument; nullopt when malformed.
std::optional<fence::TokenText> ioctl_token(const void* in, size_t in_size, std::string* text) {
  if (in_size != sizeof(fencefs_token)) return std::nullopt;
  fencefs_token t;
  memcpy(&t, in, sizeof t);
  *text = std::to_string(t.epoch);
  bool has_sig = false;
  for (char ch : t.signature) has_sig |= ch != 0;
  if (has_sig) *text += "." + std::string(t.signature, strnlen(t.signature, sizeof t.signature));
  return fence::parse_token_text(*text);
}

}  // namespace

// The token of a FENCEFS_IOC_* argument, if well formed and the caller may present it for d.
static int authorized_ioctl_token(Fs& f, const fence::Caller& c, Domain& d, const char* op,
                                  const void* in, size_t in_size, fence::TokenText* out) {
  std::string text;
  auto tt = ioctl_token(in, in_size, &text);
  if (!tt)
    return refuse_ctl(f, c, op, fence::Reason::Malformed, &d, d.path, text, EINVAL,
                      fmt::format("malformed token in the {} ioctl", op));
  std::string why;
  if (int err = f.fence().authorize(c, d, *tt, false, &why))
    return refuse_ctl(f, c, op, fence::Reason::Unauthorised, &d, d.path, token_str(*tt), err, why);
  *out = *tt;
  return 0;
}

int ctl_ioctl_set_token(fuse_req_t req, Handle& h, const void* in, size_t in_size) {
  Fs& f = fs(req);
  fence::Caller c = f.caller(req);
  Domain& d = *h.domain;
  fence::TokenText tt;
  if (int err = authorized_ioctl_token(f, c, d, "ioctl", in, in_size, &tt)) return err;
  std::string tok = token_str(tt);
  auto dec = f.fence().decide(fence::RequestKind::Ioctl, d, tt.epoch, false, h.stale.load());
  if (dec.refused()) return f.fence().refuse(c, {"ioctl", &d, d.path, tok}, std::move(dec));
  h.token = tt.epoch;
  note_ctl(f, c, "ioctl", "bound", &d, d.path, tok,
           fmt::format("handle rebound to token {}", tt.epoch));
  return 0;
}

void ctl_ioctl_advance(fuse_req_t req, Domain& d, const void* in, size_t in_size) {
  Fs& f = fs(req);
  fence::Caller c = f.caller(req);
  fence::TokenText tt;
  if (int err = authorized_ioctl_token(f, c, d, "advance", in, in_size, &tt))
    return (void)fuse_reply_err(req, err);
  // Replied by whoever makes the epoch durable: this worker goes back to serving meanwhile.
  f.fence().advance_async(d, tt.epoch, c, [req](int err) {
    if (err) return (void)fuse_reply_err(req, err);
    fuse_reply_ioctl(req, 0, nullptr, 0);
  });
}

int ctl_ioctl_bind(fuse_req_t req, Domain& d, const void* in, size_t in_size) {
  Fs& f = fs(req);
  fence::Caller c = f.caller(req);
  fence::TokenText tt;
  if (int err = authorized_ioctl_token(f, c, d, "bind", in, in_size, &tt)) return err;
  std::string tok = token_str(tt);
  if (auto dec = f.fence().decide(fence::RequestKind::Bind, d, tt.epoch); dec.refused())
    return f.fence().refuse(c, {"bind", &d, d.path, tok}, std::move(dec));
  if (int err = f.bindings().bind(c.pid, d.id, tt.epoch)) return err;
  note_ctl(f, c, "bind", "bound", &d, d.path, tok,
           fmt::format("bound pid {} to token {} for domain {} (epoch {}, ioctl)", c.pid, tt.epoch,
                       d.path, d.epoch.load()));
  return 0;
}

int ctl_ioctl_acquire(fuse_req_t req, Domain& d, const void* in, size_t in_size, void* out) {
  Fs& f = fs(req);
  fence::Caller c = f.caller(req);
  fencefs_acquire a;
  bool resync = false;
  const char* op = "acquire";
  if (in_size == sizeof a) {
    memcpy(&a, in, sizeof a);
    resync = a.flags & FENCEFS_ACQUIRE_RESYNC;
    if (resync) op = "resync";
  }
  if (in_size != sizeof a || a.reserved ||
      (a.flags & ~(FENCEFS_ACQUIRE_BIND | FENCEFS_ACQUIRE_RESYNC)) || a.epoch > fence::kMaxToken)
    return refuse_ctl(f, c, op, fence::Reason::Malformed, &d, d.path, "", EINVAL,
                      "malformed argument of the acquire ioctl");
  std::string why;
  if (!f.fence().is_issuer(c))
    return refuse_ctl(f, c, op, fence::Reason::Unauthorised, &d, d.path,
                      a.epoch ? std::to_string(a.epoch) : "", EACCES,
                      fmt::format("uid {} is not in the issuer set", c.uid));
  fence::Epoch got = 0;
  if (int err = f.fence().acquire(d, a.epoch, op, c, &got, &why)) return err;
  if (got == 0)  // never bind (or hand out) "no token": it would pass as unfenced
    return refuse_ctl(f, c, op, fence::Reason::Io, &d, d.path, "", EIO,
                      fmt::format("acquisition in domain {} returned no epoch", d.path));
  if (a.flags & FENCEFS_ACQUIRE_BIND) {
    if (int err = f.bindings().bind(c.pid, d.id, got)) return err;
    note_ctl(f, c, "bind", "bound", &d, d.path, std::to_string(got),
             fmt::format("bound pid {} to acquired token {} for domain {}", c.pid, got, d.path));
  }
  a.epoch = got;
  memcpy(out, &a, sizeof a);
  return 0;
}

}  // namespace fencefs::fs
