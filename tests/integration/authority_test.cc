// Who may present which epoch: issuers, signed tokens, forced advances, and per-handle tokens.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "fencefs/ioctl.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

constexpr uid_t kNobody = 65534;

std::string epoch(const Mount& m, const std::string& rel = "") {
  char buf[64];
  ssize_t n = getxattr((rel.empty() ? m.mnt() : m.path(rel)).c_str(), "user.fencefs.epoch", buf,
                       sizeof buf);
  return n < 0 ? "ERR" : std::string(buf, n);
}

int become_nobody() { return setgid(kNobody) || setuid(kNobody) ? -1 : 0; }

// A key file in a fresh temp dir (removed with the dir).
struct Key {
  std::string dir, path;
  explicit Key(mode_t mode) {
    dir = temp_dir("key");
    path = dir + "/k";
    std::ofstream(path) << "0123456789abcdef0123456789abcdef\n";
    chmod(path.c_str(), mode);
  }
  ~Key() { sh("rm -rf '" + dir + "'"); }
};

std::string sign(const std::string& key, const std::string& domain, uint64_t e) {
  std::string out = sh_out(std::string(FENCECTL_BIN) + " sign --key '" + key + "' --domain '" +
                           domain + "' --epoch " + std::to_string(e));
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Gives epoch 3 to the root domain, and a root-owned world-writable dir to play in.
void setup(const Mount& m) {
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 3")) return 1;
              if (mkdir(m.path("shared").c_str(), 0777)) return 2;
              return chmod(m.path("shared").c_str(), 0777) ? 3 : 0;
            }));
}

}  // namespace

TEST(Authority, UnprivilegedCallerCannotBindOrAdvance) {
  Mount m;
  setup(m);
  for (const char* line : {"bind / 3", "bind / 4", "bind / 9223372036854775807", "advance / 4",
                           "advance / 9223372036854775807 force"}) {
    EXPECT_EQ(EACCES, in_child([&] { return become_nobody() ? 99 : m.ctl(line); })) << line;
    EXPECT_EQ("3", epoch(m)) << line;
  }
  // And without a binding nobody cannot write, even in a world-writable dir.
  EXPECT_EQ(EPERM, in_child([&] {
              if (become_nobody()) return 99;
              return E(mkdir(m.path("shared/x").c_str(), 0755));
            }));
  EXPECT_EQ("3", epoch(m));
}

TEST(Authority, PrivilegeDropKeepsTheBindingButNotThePower) {
  Mount m;
  setup(m);
  std::string c = FENCECTL_BIN;
  // The job writes as nobody with token 3 ...
  EXPECT_EQ(0, sh(c + " run --mount '" + m.mnt() +
                  "' --domain / --token 3 --user nobody -- sh -c '"
                  "id -u > " +
                  m.path("shared/who") + "'"));
  struct stat st;
  ASSERT_EQ(0, stat(m.bpath("shared/who").c_str(), &st));
  EXPECT_EQ(kNobody, st.st_uid);
  // ... and cannot raise, re-bind or advance.
  std::string tries =
      "for l in 'bind / 4' 'bind / 3' 'advance / 4'; do "
      "if echo \"$l\" > " +
      m.ctl_path() +
      " 2>/dev/null; then exit 1; fi; done; "
      "touch " +
      m.path("shared/still-works");
  EXPECT_EQ(0, sh(c + " run --mount '" + m.mnt() +
                  "' --domain / --token 3 --user nobody -- sh -c \"" + tries + "\""));
  EXPECT_EQ(0, stat(m.bpath("shared/still-works").c_str(), &st));
  EXPECT_EQ("3", epoch(m));
  // A bind that fails leaves the job unstarted, with fencectl's "malformed" status (not a domain).
  int status;
  sh_out(c + " run --mount '" + m.mnt() + "' --domain /nope --token 3 -- true 2>&1", &status);
  EXPECT_EQ(204, status);
}

TEST(Authority, SignedTokens) {
  Key k(0600);
  std::string key = k.path;
  Mount m({"-o", "token_key=" + key});
  setup(m);
  std::string good = sign(key, "/", 5);
  ASSERT_EQ(good.size(), 1 + 1 + 64u) << good;
  // Anyone may bind a correctly signed token, and it advances the epoch when used.
  EXPECT_EQ(0, in_child([&] {
              if (become_nobody()) return 99;
              if (int e = m.ctl("bind / " + good)) return e;
              return E(mkdir(m.path("shared/signed").c_str(), 0755));
            }));
  EXPECT_EQ("5", epoch(m));
  std::string tampered = good;
  tampered.back() = tampered.back() == '0' ? '1' : '0';
  std::string other_domain = sign(key, "/other", 6);
  std::string other_epoch = "6" + good.substr(1);  // epoch 6 with epoch 5's signature
  for (const std::string& t :
       {tampered, good.substr(0, good.size() - 2), other_domain, other_epoch}) {
    int r = in_child([&] { return become_nobody() ? 99 : m.ctl("bind / " + t); });
    EXPECT_TRUE(r == EACCES || r == EINVAL) << t << " -> " << r;
    EXPECT_EQ("5", epoch(m));
  }
  // Signed tokens are not issuers: no forced advance.
  std::string s7 = sign(key, "/", 7);
  EXPECT_EQ(EACCES,
            in_child([&] { return become_nobody() ? 99 : m.ctl("advance / " + s7 + " force"); }));
  EXPECT_EQ(0, in_child([&] { return become_nobody() ? 99 : m.ctl("advance / " + s7); }));
  EXPECT_EQ("7", epoch(m));
}

// A signed token is a bearer credential: given as @FILE (or @- for standard input) it is read
// from there and never appears in the process list.
TEST(Authority, SignedTokensFromAFileStayOutOfTheProcessList) {
  Key k(0600);
  std::string key = k.path;
  Mount m({"-o", "token_key=" + key});
  setup(m);
  const std::string c = FENCECTL_BIN;
  const std::string file = k.dir + "/token";
  spit(file, sign(key, "/", 5) + "\n");
  ::chmod(file.c_str(), 0644);   // nobody reads it below
  ::chmod(k.dir.c_str(), 0755);  // the key itself stays 0600
  int status =
      sh("su nobody -s /bin/sh -c \"" + c + " run --mount '" + m.mnt() + "' --domain / --token @" +
         file + " -- mkdir " + m.path("shared/from-file") + "\"");
  EXPECT_EQ(0, status);
  struct stat st;
  EXPECT_EQ(0, stat(m.bpath("shared/from-file").c_str(), &st));
  EXPECT_EQ("5", epoch(m));
  EXPECT_EQ(0, sh("echo '" + sign(key, "/", 6) + "' | su nobody -s /bin/sh -c '" + c +
                  " advance --mount " + m.mnt() + " / @-'"));
  EXPECT_EQ("6", epoch(m));
  // From standard input, the token's line alone is read: the rest is the job's.
  EXPECT_EQ(
      0, sh("printf '%s\\nfor the job\\n' '" + sign(key, "/", 6) + "' | " + c + " run --mount '" +
            m.mnt() + "' --domain / --token @- -- sh -c 'cat > " + m.path("shared/stdin") + "'"));
  EXPECT_EQ("for the job\n", slurp(m.bpath("shared/stdin")));
  // A line longer than any token is refused, not cut short with its rest given to the job.
  sh_out("(printf 5; head -c 5000 /dev/zero | tr '\\0' ' '; echo x) | " + c + " run --mount '" +
             m.mnt() + "' --domain / --token @- -- true 2>&1",
         &status);
  EXPECT_EQ(200, status);
  sh_out(c + " advance --mount '" + m.mnt() + "' / @" + k.dir + "/missing 2>&1", &status);
  EXPECT_EQ(200, status);
  EXPECT_EQ("6", epoch(m));
}

// A mount with key k: what it said (it should have refused) and its exit status in *st.
std::string mount_with_key(const Key& k, int* st) {
  sh("mkdir -p " + k.dir + "/b " + k.dir + "/m");
  return sh_out(std::string(FENCEFS_BIN) + " -f -o token_key=" + k.path + " " + k.dir + "/b " +
                    k.dir + "/m 2>&1",
                st);
}

TEST(Authority, KeyReadableByOthersRefusesToMount) {
  Key k(0644);
  int st;
  std::string out = mount_with_key(k, &st);
  EXPECT_EQ(1, st);
  EXPECT_NE(std::string::npos, out.find("chmod 600")) << out;
}

TEST(Authority, KeyOwnedBySomeoneElseRefusesToMount) {
  Key k(0600);
  ASSERT_EQ(0, ::chown(k.path.c_str(), kNobody, kNobody));
  int st;
  std::string out = mount_with_key(k, &st);
  EXPECT_EQ(1, st);
  EXPECT_NE(std::string::npos, out.find("is owned by uid " + std::to_string(kNobody))) << out;
}

TEST(Authority, MaxJumpStopsEpochSquatting) {
  Mount m({"-o", "max_jump=10"});
  setup(m);
  EXPECT_EQ(ERANGE, in_child([&] { return m.ctl("bind / 14"); }));
  EXPECT_EQ(ERANGE, in_child([&] { return m.ctl("bind / 9223372036854775807"); }));
  EXPECT_EQ(ERANGE, in_child([&] { return m.ctl("advance / 100"); }));
  EXPECT_EQ("3", epoch(m));
  EXPECT_EQ(0, in_child([&] { return m.ctl("bind / 13"); }));
  EXPECT_EQ(0, sh(std::string(FENCECTL_BIN) + " advance --force --mount '" + m.mnt() + "' / 100"));
  EXPECT_EQ("100", epoch(m));
}

TEST(Authority, PerHandleTokenByIoctl) {
  Mount m;
  setup(m);
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 3")) return 1;
              int fd = open(m.path("f").c_str(), O_WRONLY | O_CREAT, 0666);
              return fd < 0 ? 2 : 0;
            }));
  // Root (an issuer) opens with token 3, then rebinds the handle to 4: its writes advance to 4.
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 3")) return 1;
              int fd = open(m.path("f").c_str(), O_WRONLY);
              if (fd < 0) return 2;
              fencefs_token t{};
              t.epoch = 4;
              if (ioctl(fd, FENCEFS_IOC_SET_TOKEN, &t) != 0) return 100 + errno;
              if (write(fd, "four", 4) != 4) return 3;
              t.epoch = 2;  // lower than the epoch: refused at the ioctl, the handle keeps 4
              if (E(ioctl(fd, FENCEFS_IOC_SET_TOKEN, &t)) != ESTALE) return 4;
              if (write(fd, "more", 4) != 4) return 8;
              // Superseded while it holds the handle: refused at the write ...
              if (in_child([&] { return m.ctl("advance / 5"); }) != 0) return 9;
              if (E(write(fd, "two", 3)) != ESTALE) return 5;
              t.epoch = 5;  // ... and once refused as stale, the handle stays refused
              if (E(ioctl(fd, FENCEFS_IOC_SET_TOKEN, &t)) != ESTALE) return 6;
              t.epoch = 0;
              if (E(ioctl(fd, FENCEFS_IOC_SET_TOKEN, &t)) != EINVAL) return 7;
              return 0;
            }));
  EXPECT_EQ("5", epoch(m));
  EXPECT_EQ("fourmore", slurp(m.bpath("f")));
  // nobody may not use the ioctl with an unsigned token.
  EXPECT_EQ(EACCES, in_child([&] {
              int fd = open(m.path("f").c_str(), O_RDONLY);
              if (fd < 0 || become_nobody()) return 99;
              fencefs_token t{};
              t.epoch = 6;
              return E(ioctl(fd, FENCEFS_IOC_SET_TOKEN, &t));
            }));
  EXPECT_EQ("5", epoch(m));
}

TEST(Authority, PermissionsStillApplyAndDenialNeverAdvances) {
  Key k(0600);
  std::string key = k.path;
  Mount m({"-o", "token_key=" + key});
  setup(m);
  ASSERT_EQ(0, in_child([&] {
              if (m.ctl("bind / 3")) return 1;
              int fd = open(m.path("roots").c_str(), O_WRONLY | O_CREAT, 0644);
              return fd < 0 ? 2 : 0;
            }));
  std::string t9 = sign(key, "/", 9);
  EXPECT_EQ(EACCES, in_child([&] {
              if (become_nobody() || m.ctl("bind / " + t9)) return 99;
              return E(open(m.path("roots").c_str(), O_WRONLY));
            }));
  EXPECT_EQ(EACCES, in_child([&] {
              if (become_nobody() || m.ctl("bind / " + t9)) return 99;
              return E(mkdir(m.path("nope").c_str(), 0755));  // root dir is 0755 root-owned
            }));
  EXPECT_EQ("3", epoch(m)) << "a denied permission advanced the epoch";
}

TEST(Authority, HostileControlWrites) {
  Mount m;
  setup(m);
  auto raw = [&](const std::string& data) {
    return in_child([&] {
      int fd = open(m.ctl_path().c_str(), O_WRONLY);
      if (fd < 0) return 98;
      return write(fd, data.data(), data.size()) < 0 ? errno : 0;
    });
  };
  EXPECT_EQ(EINVAL, raw(std::string("bind / 4\0", 9)));
  EXPECT_EQ(EINVAL, raw(std::string("bind /\0 4\n", 10)));
  EXPECT_EQ(EINVAL, raw("bind / " + std::string(5000, '9') + "\n"));
  EXPECT_EQ(EINVAL, raw("bind / \xd9\xa4\n"));  // ARABIC-INDIC DIGIT FOUR
  EXPECT_EQ(EINVAL, raw("bind / 4\nadvance / 5\n"));
  EXPECT_EQ(EINVAL, raw("bind / "));  // a partial command is just malformed
  EXPECT_EQ(EINVAL, raw("4\n"));
  EXPECT_EQ("3", epoch(m));
  // Concurrent writers each get their own answer; the epoch ends at the highest advance.
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int i = 0; i < 8; i++) {
    ts.emplace_back([&, i] {
      for (int k = 0; k < 20; k++)
        if (int r = m.ctl("advance / " + std::to_string(4 + i * 20 + k)); r != 0 && r != ESTALE)
          failures++;  // ESTALE: another writer's higher advance landed first
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(0, failures.load());
  EXPECT_EQ("163", epoch(m));
}

TEST(Authority, AdvanceByIoctl) {
  Mount m;
  setup(m);
  auto advance = [&](uint64_t e, bool as_nobody) {
    return in_child([&] {
      int fd = open(m.path("shared").c_str(), O_RDONLY | O_DIRECTORY);
      if (fd < 0 || (as_nobody && become_nobody())) return 99;
      fencefs_token t{};
      t.epoch = e;
      return E(ioctl(fd, FENCEFS_IOC_ADVANCE, &t));
    });
  };
  EXPECT_EQ(0, advance(5, false));
  EXPECT_EQ("5", epoch(m));
  EXPECT_EQ(0, advance(5, false)) << "equal is a no-op";
  EXPECT_EQ(ESTALE, advance(4, false));
  EXPECT_EQ(EACCES, advance(6, true));
  EXPECT_EQ(EINVAL, advance(0, false));
  EXPECT_EQ("5", epoch(m));
}
