// Tokens from the same step that grants ownership: `fencectl run --acquire` (the resource is the
// issuer) and `fencectl run --etcd … --lock …` (etcd is), against real mounts and a real etcd.
#include <fcntl.h>
#include <fencefs/ioctl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "integration/etcd_fixture.h"
#include "integration/mount_fixture.h"

namespace fencefs::testing {
namespace {

const std::string kCtl = FENCECTL_BIN;

// fencectl's exit codes (src/cli/exit_codes.h), spelled out: a test of the documented values.
constexpr int kUsage = 200, kStale = 201, kTooFar = 202, kUnauthorised = 203, kMalformed = 204,
              kUnreachable = 205, kJournalIo = 206, kLockTimeout = 207, kLeaseLost = 208,
              kIssuerBehind = 209, kRollback = 210, kLockService = 211, kExecFailed = 212;

// A scratch dir outside the mount for job scripts and their reports.
struct Scratch {
  std::string dir;
  Scratch() {
    char t[] = "/tmp/fencefs-lease-XXXXXX";
    dir = mkdtemp(t);
  }
  ~Scratch() { sh("rm -rf '" + dir + "'"); }
  std::string p(const std::string& n) const { return dir + "/" + n; }
  // Writes an executable bash script with M (mount) and R (scratch) set.
  std::string script(const std::string& name, const Mount& m, const std::string& body) const {
    std::string path = p(name);
    spit(path, "#!/bin/bash\nM='" + m.mnt() + "'\nR='" + dir + "'\n" + body + "\n");
    chmod(path.c_str(), 0755);
    return path;
  }
};

bool wait_for(const std::function<bool()>& cond, int ms = 20000) {
  for (int t = 0; t < ms; t += 20) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

bool exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Starts a shell command in the background; returns its pid (its own process group leader).
// Prefix the command with "exec " when the pid must be the program's own.
pid_t spawn(const std::string& cmd) {
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

int wait_status(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

std::string run_etcd(const Mount& m, const Etcd& e, const std::string& lock,
                     const std::string& extra) {
  return kCtl + " run --mount '" + m.mnt() + "' --domain / --etcd " + e.endpoints() + " --lock " +
         lock + " " + extra + " -- ";
}

TEST(Acquire, SecondRunRevokesTheFirst) {
  Mount m;
  Scratch s;
  std::string job1 = s.script("job1", m,
                              "echo $FENCEFS_TOKEN > $R/tok1\n"
                              "exec 3>$M/data\n"
                              "echo one >&3 || exit 3\n"
                              "touch $R/ready\n"
                              "while [ ! -e $R/go ]; do sleep 0.02; done\n"
                              "if echo late >&3 2>$R/err1; then echo accepted; else echo refused; "
                              "fi > $R/res1\n");
  pid_t a =
      spawn("exec " + kCtl + " run --mount '" + m.mnt() + "' --domain / --acquire -- " + job1);
  ASSERT_TRUE(wait_for([&] { return exists(s.p("ready")); }));
  EXPECT_EQ("1", trim(slurp(s.p("tok1"))));
  EXPECT_EQ(0, sh(kCtl + " run --mount '" + m.mnt() +
                  "' --domain / --acquire -- sh -c 'echo $FENCEFS_TOKEN $FENCEFS_DOMAIN > " +
                  s.p("tok2") + "; echo two > " + m.path("data") + "'"));
  EXPECT_EQ("2 /", trim(slurp(s.p("tok2"))));
  EXPECT_EQ("2", xattr(m.mnt(), "user.fencefs.epoch"));
  spit(s.p("go"), "");
  EXPECT_EQ(0, wait_status(a));
  EXPECT_EQ("refused", trim(slurp(s.p("res1"))));
  EXPECT_NE(std::string::npos, slurp(s.p("err1")).find("Stale file handle"));
  EXPECT_EQ("two\n", slurp(m.path("data")));
}

TEST(Ioctl, AcquireAndBindOnTheDomainsDirectory) {
  Mount m;
  ASSERT_EQ(0, in_child([&] {
              int dir = open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY);
              fencefs_acquire a{};
              a.flags = FENCEFS_ACQUIRE_BIND;
              if (ioctl(dir, FENCEFS_IOC_ACQUIRE, &a) != 0 || a.epoch != 1) return 1;
              // Bound by the acquisition: this process writes with token 1.
              if (E(mkdir(m.path("by1").c_str(), 0755))) return 2;
              a = fencefs_acquire{};
              a.epoch = 1;  // equal: never a second owner of one epoch
              if (ioctl(dir, FENCEFS_IOC_ACQUIRE, &a) == 0 || errno != ESTALE) return 3;
              a = fencefs_acquire{};
              a.reserved = 1;
              if (ioctl(dir, FENCEFS_IOC_ACQUIRE, &a) == 0 || errno != EINVAL) return 4;
              return 0;
            }));
  ASSERT_EQ(0, in_child([&] {  // a fresh process binds by ioctl
              int dir = open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY);
              fencefs_token t{};
              t.epoch = 1;
              if (ioctl(dir, FENCEFS_IOC_BIND, &t) != 0) return 1;
              return E(mkdir(m.path("bound").c_str(), 0755));
            }));
  EXPECT_EQ(0, in_child([&] {  // neither is open to a non-issuer
              int dir = open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY);
              if (setgid(65534) != 0 || setuid(65534) != 0) return 1;
              fencefs_acquire a{};
              if (ioctl(dir, FENCEFS_IOC_ACQUIRE, &a) == 0 || errno != EACCES) return 2;
              fencefs_token t{};
              t.epoch = 1;
              if (ioctl(dir, FENCEFS_IOC_BIND, &t) == 0 || errno != EACCES) return 3;
              return 0;
            }));
  EXPECT_EQ("1", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(Run, SignedTokenWithoutReadPermissionOnTheDomainBindsViaTheControlFile) {
  Scratch s;
  std::string key = s.p("key");
  spit(key, "0123456789abcdef0123456789abcdef");
  chmod(key.c_str(), 0600);
  chmod(s.dir.c_str(), 0755);
  Mount m({"-o", "token_key=" + key}, [](const std::string& b) {
    mkdir((b + "/d").c_str(), 0733);  // others may enter and create, not list
    chmod((b + "/d").c_str(), 0733);
  });
  ASSERT_EQ(0, sh(kCtl + " domain add '" + m.path("d") + "' >/dev/null"));
  std::string tok = trim(sh_out(kCtl + " sign --key '" + key + "' --domain /d --epoch 3"));
  ASSERT_FALSE(tok.empty());
  EXPECT_EQ(0, sh("su nobody -s /bin/sh -c \"" + kCtl + " run --mount '" + m.mnt() +
                  "' --domain /d --token " + tok + " -- touch '" + m.path("d/x") + "'\""));
  EXPECT_TRUE(exists(m.bpath("d/x")));
  EXPECT_EQ("3", xattr(m.path("d"), "user.fencefs.epoch"));
}

TEST(ExitCodes, EachFailureHasItsOwnCode) {
  Mount m({"-o", "max_jump=10"});
  Scratch s;
  std::string run = kCtl + " run --mount '" + m.mnt() + "' --domain / ";
  std::string marker = s.p("ran");
  std::string touch = " -- touch " + marker + " 2>/dev/null";
  // CMD's own status passes through unchanged.
  EXPECT_EQ(7, sh(run + "--acquire -- sh -c 'exit 7'"));
  EXPECT_EQ(0, sh(kCtl + " advance --mount '" + m.mnt() + "' / 5 >/dev/null"));
  EXPECT_EQ(kStale, sh(kCtl + " advance --mount '" + m.mnt() + "' / 3 2>/dev/null"));
  EXPECT_EQ(kTooFar, sh(kCtl + " advance --mount '" + m.mnt() + "' / 50 2>/dev/null"));
  EXPECT_EQ(kTooFar, sh(run + "--token 50" + touch));
  EXPECT_EQ(kMalformed, sh(run + "--token 07" + touch));
  EXPECT_EQ(kMalformed,
            sh(kCtl + " run --mount '" + m.mnt() + "' --domain /none --acquire" + touch));
  EXPECT_EQ(kUnauthorised, sh("su nobody -s /bin/sh -c \"" + run + "--acquire" + touch + "\""));
  EXPECT_EQ(kUnreachable, sh(kCtl + " run --mount " + s.dir + " --domain / --acquire" + touch));
  EXPECT_EQ(kUsage, sh(run + "--token 9 --acquire" + touch));  // one way to get a token, not two
  EXPECT_FALSE(exists(marker)) << "CMD ran although fencectl failed";
  EXPECT_EQ(kExecFailed, sh(run + "--acquire -- " + s.p("no-such-program") + " 2>/dev/null"));
  EXPECT_EQ("6", xattr(m.mnt(), "user.fencefs.epoch"));  // 5, then the exec-failed acquisition
}

TEST(ExitCodes, JournalFailureIsJournalIo) {
  ASSERT_EQ(0, sh("command -v fiu-run >/dev/null && command -v fiu-ctrl >/dev/null"));
  Mount m({"--fiu"});
  ASSERT_TRUE(m.mounted()) << m.daemon_log();
  std::string pid = std::to_string(m.daemon_pid());
  ASSERT_EQ(0, sh("fiu-ctrl -c 'enable name=posix/io/sync/fdatasync,failinfo=5' " + pid));
  ASSERT_EQ(0, sh("fiu-ctrl -c 'enable name=posix/io/sync/fsync,failinfo=5' " + pid));
  EXPECT_EQ(kJournalIo,
            sh(kCtl + " run --mount '" + m.mnt() + "' --domain / --acquire -- true 2>/dev/null"));
  EXPECT_EQ(kJournalIo, sh(kCtl + " advance --mount '" + m.mnt() + "' / 3 2>/dev/null"));
  sh("fiu-ctrl -c 'disable name=posix/io/sync/fdatasync' " + pid);
  sh("fiu-ctrl -c 'disable name=posix/io/sync/fsync' " + pid);
  EXPECT_EQ("0", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(ExitCodes, RolledBackStateIsRollback) {
  Mount m;
  ASSERT_EQ(0, m.unmount());
  std::string old_state = m.root() + "/old-state";
  ASSERT_EQ(0, sh("cp -a '" + m.bpath(".fencefs") + "' '" + old_state + "'"));
  ASSERT_TRUE(m.remount());
  ASSERT_EQ(0, sh(kCtl + " run --mount '" + m.mnt() + "' --domain / --token 5 -- sh -c 'echo v > " +
                  m.path("data") + "'"));
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("rm -rf '" + m.bpath(".fencefs") + "' && cp -a '" + old_state + "' '" +
                  m.bpath(".fencefs") + "'"));
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  // epoch + 1 = 1 is below the epoch the data has seen: an acquisition would revoke nothing.
  Scratch s;
  EXPECT_EQ(kRollback, sh(kCtl + " run --mount '" + m.mnt() + "' --domain / --acquire -- touch " +
                          s.p("ran") + " 2>/dev/null"));
  EXPECT_FALSE(exists(s.p("ran")));
}

TEST(EtcdRun, UnreachableAtStartNeverStartsCmd) {
  Mount m;
  Scratch s;
  std::string cmd = kCtl + " run --mount '" + m.mnt() +
                    "' --domain / --etcd 127.0.0.1:" + std::to_string(free_port()) +
                    " --lock j -- touch " + s.p("ran") + " 2>/dev/null";
  EXPECT_EQ(kLockService, sh(cmd));
  EXPECT_FALSE(exists(s.p("ran")));
  EXPECT_EQ("0", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(EtcdRun, LockTimeoutAndPassThrough) {
  Mount m;
  Etcd e;
  Scratch s;
  pid_t holder = spawn("exec " + run_etcd(m, e, "j", "--ttl 5") + "sh -c 'touch " + s.p("held") +
                       "; while [ ! -e " + s.p("go") + " ]; do sleep 0.02; done; exit 3'");
  ASSERT_TRUE(wait_for([&] { return exists(s.p("held")); }));
  EXPECT_EQ(kLockTimeout, sh(run_etcd(m, e, "j", "--wait 1") + "touch " + s.p("ran")));
  EXPECT_FALSE(exists(s.p("ran")));
  spit(s.p("go"), "");
  EXPECT_EQ(3, wait_status(holder)) << "CMD's status passes through";
  EXPECT_EQ(0, sh(run_etcd(m, e, "j", "--wait 5") + "touch " + s.p("ran")));
  EXPECT_TRUE(exists(s.p("ran")));
  EXPECT_EQ("2", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(EtcdRun, TwoRunnersContendOneAtATime) {
  Mount m;
  Etcd e;
  Scratch s;
  // Each job: alone (mkdir is atomic), its token already the domain's epoch before its first
  // write, then appends its token to a fenced log.
  std::string job = s.script("job", m,
                             "mkdir $R/inside || { echo overlap >> $R/bad; exit 1; }\n"
                             "ep=$(getfattr --only-values -n user.fencefs.epoch $M)\n"
                             "[ \"$ep\" = \"$FENCEFS_TOKEN\" ] || echo \"epoch $ep token "
                             "$FENCEFS_TOKEN\" >> $R/bad\n"
                             "echo $FENCEFS_TOKEN >> $M/log || echo refused >> $R/bad\n"
                             "sleep 0.1\n"
                             "rmdir $R/inside\n");
  std::string loop = "for i in 1 2 3 4; do " + run_etcd(m, e, "contend", "--ttl 5 --wait 30") +
                     job + " || exit 1; done";
  pid_t a = spawn(loop), b = spawn(loop);
  EXPECT_EQ(0, wait_status(a));
  EXPECT_EQ(0, wait_status(b));
  EXPECT_EQ("", slurp(s.p("bad")));
  EXPECT_EQ("1\n2\n3\n4\n5\n6\n7\n8\n", slurp(m.path("log"))) << "tokens strictly increase";
}

TEST(EtcdRun, PausedHolderLosesLeaseIsRefusedAndKilled) {
  Mount m;
  Etcd e;
  Scratch s;
  // A's job ignores SIGTERM, so the runner must escalate to SIGKILL after --grace.
  std::string job_a = s.script("job_a", m,
                               "trap '' TERM\n"
                               "echo $$ > $R/a_pid\n"
                               "exec 3>$M/data\n"
                               "echo A1 >&3\n"
                               "touch $R/a_ready\n"
                               "while [ ! -e $R/go ]; do sleep 0.02; done\n"
                               "for i in 1 2 3; do\n"
                               "  if echo A-late >&3 2>/dev/null; then echo accepted; else echo "
                               "refused; fi >> $R/a_res\n"
                               "done\n"
                               "touch $R/a_tried\n"
                               "while :; do sleep 0.05; done\n");
  pid_t runner_a = spawn("exec " + run_etcd(m, e, "paused", "--ttl 2 --grace 1") + job_a);
  ASSERT_TRUE(wait_for([&] { return exists(s.p("a_ready")); }));
  pid_t job = std::stoi(slurp(s.p("a_pid")));
  // The whole holder pauses: the runner (so no keepalive) and the job's process group.
  ASSERT_EQ(0, kill(runner_a, SIGSTOP));
  ASSERT_EQ(0, kill(-job, SIGSTOP));
  // B waits for A's lease to expire, acquires, advances and writes.
  EXPECT_EQ(0, sh(run_etcd(m, e, "paused", "--ttl 2 --wait 20") + "sh -c 'echo $FENCEFS_TOKEN > " +
                  s.p("b_tok") + "; echo B > " + m.path("data") + "'"));
  EXPECT_EQ("2", trim(slurp(s.p("b_tok"))));
  // A's job wakes first and keeps writing through its open handle: every write is refused.
  spit(s.p("go"), "");
  ASSERT_EQ(0, kill(-job, SIGCONT));
  ASSERT_TRUE(wait_for([&] { return exists(s.p("a_tried")); }));
  EXPECT_EQ("refused\nrefused\nrefused\n", slurp(s.p("a_res")));
  // A's runner wakes, learns the lease is gone, kills the job and says so.
  ASSERT_EQ(0, kill(runner_a, SIGCONT));
  EXPECT_EQ(kLeaseLost, wait_status(runner_a));
  EXPECT_TRUE(wait_for([&] { return kill(job, 0) != 0; }, 5000)) << "the job outlived the lease";
  EXPECT_EQ("B\n", slurp(m.path("data")));
}

TEST(EtcdRun, SigkilledRunnerLeaseExpiresNextAcquires) {
  Mount m;
  Etcd e;
  Scratch s;
  pid_t a = spawn("exec " + run_etcd(m, e, "k", "--ttl 2") + "sh -c 'echo $$ > " + s.p("a_pid") +
                  "; exec sleep 60'");
  ASSERT_TRUE(wait_for([&] { return exists(s.p("a_pid")) && !slurp(s.p("a_pid")).empty(); }));
  pid_t job = std::stoi(slurp(s.p("a_pid")));
  kill(a, SIGKILL);
  EXPECT_EQ(128 + SIGKILL, wait_status(a));
  EXPECT_EQ(0, sh(run_etcd(m, e, "k", "--ttl 2 --wait 20") + "sh -c 'echo $FENCEFS_TOKEN > " +
                  s.p("b_tok") + "'"));
  EXPECT_EQ("2", trim(slurp(s.p("b_tok"))));
  kill(-job, SIGKILL);  // the orphaned job (its token is stale now)
}

// A signal to the runner goes to the job, whichever of the runner's threads the kernel picks;
// the runner then releases the lease at once (--ttl 60 would otherwise hold the lock a minute).
TEST(EtcdRun, TermOrHupToTheRunnerStopsTheJobAndReleasesTheLock) {
  Mount m;
  Etcd e;
  Scratch s;
  for (int sig : {SIGTERM, SIGHUP}) {
    std::string pidfile = s.p("pid" + std::to_string(sig));
    pid_t a = spawn("exec " + run_etcd(m, e, "sig", "--ttl 60") + "sh -c 'echo $$ > " + pidfile +
                    "; exec sleep 60'");
    ASSERT_TRUE(wait_for([&] { return exists(pidfile) && !slurp(pidfile).empty(); }));
    pid_t job = std::stoi(slurp(pidfile));
    ASSERT_EQ(0, kill(a, sig));
    EXPECT_EQ(128 + sig, wait_status(a)) << "the runner reports the job's end by the signal";
    EXPECT_TRUE(wait_for([&] { return kill(job, 0) != 0; }, 5000)) << "the job outlived its runner";
    kill(-job, SIGKILL);
    EXPECT_EQ(0, sh(run_etcd(m, e, "sig", "--ttl 5 --wait 10") + "true"))
        << "the lock was still held";
  }
}

TEST(EtcdRun, RestoredIssuerIsCaughtAndResyncRecovers) {
  Mount m;
  Etcd e;
  Scratch s;
  std::string ok = run_etcd(m, e, "r", "--ttl 5") + "true";
  ASSERT_EQ(0, sh(ok));  // token 1
  ASSERT_TRUE(e.snapshot_save(s.p("snap.db")));
  ASSERT_EQ(0, sh(ok));  // 2
  ASSERT_EQ(0, sh(ok));  // 3
  EXPECT_EQ("3", xattr(m.mnt(), "user.fencefs.epoch"));
  ASSERT_TRUE(e.snapshot_restore(s.p("snap.db")));  // the counter is back at 1
  int st = -1;
  std::string out = sh_out(run_etcd(m, e, "r", "--ttl 5") + "touch " + s.p("ran") + " 2>&1", &st);
  EXPECT_EQ(kIssuerBehind, st);  // drew 2, the resource is at 3
  EXPECT_FALSE(exists(s.p("ran")));
  EXPECT_NE(std::string::npos, out.find("issuer behind the resource")) << out;
  EXPECT_EQ("3", xattr(m.mnt(), "user.fencefs.epoch"));
  // Draws 3, still not above 3: --resync moves the counter to 4 and acquires that.
  EXPECT_EQ(0, sh(run_etcd(m, e, "r", "--ttl 5 --resync") + "sh -c 'echo $FENCEFS_TOKEN > " +
                  s.p("tok") + "' 2>/dev/null"));
  EXPECT_EQ("4", trim(slurp(s.p("tok"))));
  EXPECT_EQ("4", xattr(m.mnt(), "user.fencefs.epoch"));
  EXPECT_EQ("4\n", e.etcdctl("get --print-value-only fencefs/token/r"));
  ASSERT_EQ(0, sh(ok));  // and the sequence goes on from there
  EXPECT_EQ("5", xattr(m.mnt(), "user.fencefs.epoch"));
  // A lock name new to the domain looks the same, and the message says it may be that.
  out = sh_out(run_etcd(m, e, "fresh", "--ttl 5") + "true 2>&1", &st);
  EXPECT_EQ(kIssuerBehind, st);
  EXPECT_NE(std::string::npos, out.find("the lock name is new to this domain")) << out;
  out = sh_out(run_etcd(m, e, "fresh", "--ttl 5 --resync") + "true 2>&1", &st);
  EXPECT_EQ(0, st) << out;
  EXPECT_EQ(std::string::npos, out.find("issuer behind")) << "--resync was asked for: " << out;
  EXPECT_NE(std::string::npos, out.find("resync: counter of lock fresh moved")) << out;
  EXPECT_EQ("6", xattr(m.mnt(), "user.fencefs.epoch"));
  std::string audit = sh_out(kCtl + " audit --mount '" + m.mnt() + "' --json");
  EXPECT_NE(std::string::npos, audit.find("\"op\":\"acquire\",\"decision\":\"refused\"")) << audit;
  EXPECT_NE(std::string::npos, audit.find("\"op\":\"resync\",\"decision\":\"advanced\"")) << audit;
}

TEST(EtcdLease, ScriptCommandsAcquireKeepaliveRelease) {
  Mount m;
  Etcd e;
  std::string base = kCtl + " lease acquire --etcd " + e.endpoints() +
                     " --lock s --ttl 3 --mount '" + m.mnt() + "' --domain /";
  int st = -1;
  std::string out = sh_out(base, &st);
  ASSERT_EQ(0, st) << out;
  EXPECT_NE(std::string::npos, out.find("FENCEFS_TOKEN=1\n")) << out;
  EXPECT_EQ("1", xattr(m.mnt(), "user.fencefs.epoch"));
  std::string lease = out.substr(out.find("FENCEFS_LEASE=") + 14);
  lease = lease.substr(0, lease.find('\n'));
  std::string ka = kCtl + " lease keepalive --etcd " + e.endpoints() + " --lease " + lease;
  EXPECT_EQ(0, sh(ka + " --once >/dev/null"));
  // Held: another acquisition times out.
  EXPECT_EQ(kLockTimeout, sh(base + " --wait 1 >/dev/null 2>&1"));
  // A running keepalive keeps it past its TTL and reports its loss when it is released.
  pid_t keeper = spawn("exec " + ka + " 2>/dev/null");
  std::this_thread::sleep_for(std::chrono::milliseconds(4000));
  EXPECT_EQ(0, sh(ka + " --once >/dev/null")) << "the lease expired although kept alive";
  std::string release = kCtl + " lease release --etcd " + e.endpoints() + " --lease ";
  EXPECT_EQ("", sh_out(release + lease + " 2>&1", &st));
  EXPECT_EQ(0, st);
  EXPECT_EQ(kLeaseLost, wait_status(keeper));
  EXPECT_EQ(kLeaseLost, sh(ka + " --once 2>/dev/null"));
  // Releasing again, or a lease never granted: idempotent (the lock is free), with a note.
  for (std::string id : {lease, std::string("99999")}) {
    out = sh_out(release + id + " 2>&1", &st);
    EXPECT_EQ(0, st) << out;
    EXPECT_EQ("fencectl: lease release: lease " + id +
                  " not found (expired, already released or never granted): nothing to release\n",
              out);
  }
  // An unknown verb is named before any option is asked for.
  out = sh_out(kCtl + " lease bogus --etcd " + e.endpoints() + " 2>&1", &st);
  EXPECT_EQ(kUsage, st) << out;
  EXPECT_EQ(0u, out.rfind("fencectl: lease: unknown verb 'bogus'", 0)) << out;
  out = sh_out(base + " --wait 5", &st);
  ASSERT_EQ(0, st) << out;
  EXPECT_NE(std::string::npos, out.find("FENCEFS_TOKEN=2\n")) << out;
  EXPECT_EQ("2", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(EtcdRun, TlsWithClientCertificates) {
  Mount m;
  Etcd e(1, true);
  Scratch s;
  std::string base = kCtl + " run --mount '" + m.mnt() + "' --domain / --etcd " + e.endpoints() +
                     " --lock t --ttl 3 ";
  // Without the client certificate etcd refuses the connection: nothing runs, and it says why.
  int st = -1;
  std::string err =
      sh_out(base + "--cacert '" + e.cacert() + "' -- touch " + s.p("ran") + " 2>&1", &st);
  EXPECT_EQ(kLockService, st);
  EXPECT_NE(err.find("no client certificate was given"), std::string::npos) << err;
  EXPECT_FALSE(exists(s.p("ran")));
  EXPECT_EQ(0, sh(base + e.tls_flags() + " -- sh -c 'echo $FENCEFS_TOKEN > " + s.p("tok") + "'"));
  EXPECT_EQ("1", trim(slurp(s.p("tok"))));
  EXPECT_EQ("1\n", e.etcdctl("get --print-value-only fencefs/token/t"));
}

TEST(EtcdCluster, LeaderKilledWhileHeldNeverTwoOwners) {
  Mount m;
  Etcd e(3);
  Scratch s;
  std::string job_a = s.script("job_a", m,
                               "touch $R/a_started\n"
                               "sleep 3\n"
                               "if echo A >> $M/f 2>/dev/null; then echo ok; else echo refused; fi "
                               "> $R/a_res\n"
                               "touch $R/a_end\n");
  pid_t a = spawn("exec " + run_etcd(m, e, "ha", "--ttl 3 --grace 1") + job_a);
  ASSERT_TRUE(wait_for([&] { return exists(s.p("a_started")); }));
  int leader = e.leader();
  ASSERT_GE(leader, 0);
  e.kill(leader);
  std::string job_b = s.script("job_b", m,
                               "if [ -e $R/a_end ]; then echo after; else echo during; fi > "
                               "$R/b_order\n"
                               "echo B >> $M/f\n");
  EXPECT_EQ(0, sh(run_etcd(m, e, "ha", "--ttl 3 --wait 30") + job_b));
  int ra = wait_status(a);
  EXPECT_TRUE(ra == 0 || ra == kLeaseLost) << ra;
  std::string order = trim(slurp(s.p("b_order")));
  if (order == "during") {
    // B ran while A's job was still alive: only if A's lease was lost, and A changed nothing.
    EXPECT_EQ(kLeaseLost, ra);
    EXPECT_NE("ok", trim(slurp(s.p("a_res"))));
    EXPECT_EQ("B\n", slurp(m.path("f")));
  } else {
    EXPECT_EQ("after", order);
  }
  e.start(leader);
}

// TLS files given with a plain http:// endpoint would be ignored by curl, everything sent in
// clear: refused as a usage error, by fencectl and by the daemon, as is a key without its
// certificate or a file that cannot be read. No etcd is needed: nothing is sent.
TEST(EtcdRun, TlsFilesWithAPlainEndpointAreRefused) {
  Scratch s;
  spit(s.p("ca.pem"), "not read\n");
  std::string run = kCtl + " run --mount " + s.dir + " --domain / --lock t ";
  int st = -1;
  std::string out =
      sh_out(run + "--etcd http://127.0.0.1:1 --cacert " + s.p("ca.pem") + " -- true 2>&1", &st);
  EXPECT_EQ(kUsage, st) << out;
  EXPECT_NE(out.find("etcd endpoint http://127.0.0.1:1 is plain HTTP, but TLS files were given"),
            std::string::npos)
      << out;
  out = sh_out(run + "--etcd 127.0.0.1:1 --key " + s.p("ca.pem") + " -- true 2>&1", &st);
  EXPECT_EQ(kUsage, st) << out;
  EXPECT_NE(out.find("needs its certificate too"), std::string::npos) << out;
  out = sh_out(run + "--etcd 127.0.0.1:1 --cacert " + s.p("none.pem") + " -- true 2>&1", &st);
  EXPECT_EQ(kUsage, st) << out;
  EXPECT_NE(out.find("etcd CA certificate " + s.p("none.pem") + ": No such file"),
            std::string::npos)
      << out;
  sh("mkdir " + s.p("b") + " " + s.p("m") + " " + s.p("state"));
  out = sh_out(std::string(FENCEFS_BIN) +
                   " -f -o cluster=c1,etcd=http://127.0.0.1:1,etcd_cacert=" + s.p("ca.pem") +
                   ",state=" + s.p("state") + " " + s.p("b") + " " + s.p("m") + " 2>&1",
               &st);
  EXPECT_EQ(1, st) << out;
  EXPECT_NE(out.find("is plain HTTP, but TLS files were given"), std::string::npos) << out;
}

// The hint about a missing client certificate comes only with a failure a server refusing one
// causes (the handshake or the reply broke), not with one it cannot have caused.
TEST(EtcdRun, NoCertificateHintOnlyWhereTheServerMayHaveRefused) {
  Mount m;
  Etcd e(1, true);
  Scratch s;
  auto run = [&](const std::string& endpoint, const std::string& cacert, int* st) {
    return sh_out(kCtl + " run --mount '" + m.mnt() + "' --domain / --etcd " + endpoint +
                      " --lock t --ttl 3 --cacert '" + cacert + "' -- touch " + s.p("ran") +
                      " 2>&1",
                  st);
  };
  int st = -1;
  std::string err = run("https://no-such-host.invalid:2379", e.cacert(), &st);
  EXPECT_EQ(kLockService, st);
  EXPECT_NE(err.find("resolve"), std::string::npos) << err;
  EXPECT_EQ(err.find("no client certificate"), std::string::npos) << err;
  // A CA that did not sign etcd's certificate: the server's certificate is what failed.
  err = run(e.endpoints(), e.client_cert(), &st);
  EXPECT_EQ(kLockService, st);
  EXPECT_EQ(err.find("no client certificate"), std::string::npos) << err;
  EXPECT_FALSE(exists(s.p("ran")));
}

}  // namespace
}  // namespace fencefs::testing
