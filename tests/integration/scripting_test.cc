// Scripting against a mount as an operator would: binds refused at bind time, the control file's
// reply read by a shell, which token a caller presents, domain paths with spaces and UTF-8, and
// the metrics page as Prometheus reads it; fencectl's messages and exit statuses, its bash
// completion, and the documents against the binaries.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "fencefs/ioctl.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;

namespace {

const std::string kCtl = FENCECTL_BIN;

std::string q(const std::string& s) { return "'" + s + "'"; }

bool exists(const std::string& p) {
  struct stat st;
  return lstat(p.c_str(), &st) == 0;
}

// Runs TEXT with bash from a file (no quoting through sh -c); stdout, *status.
std::string script(const Mount& m, const std::string& text, int* status = nullptr) {
  std::string file = m.root() + "/script.sh";
  spit(file, "M=" + q(m.mnt()) + "\nCTL=" + q(kCtl) + "\n" + text);
  return sh_out("bash " + q(file), status);
}

int advance(const Mount& m, uint64_t e) {
  return in_child([&] { return m.ctl("advance / " + std::to_string(e)); });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// A token below the domain's epoch is refused when it is bound, by every way of binding.

TEST(StaleBind, RefusedAtBindTimeByTheControlFile) {
  Mount m;
  ASSERT_EQ(0, advance(m, 5));
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 4"); }));
  // Nothing was bound: the process presents no token.
  EXPECT_EQ(ESTALE, in_child([&] {
              int e = m.ctl("bind / 4");
              if (e != ESTALE) return 100 + e;
              return E(mkdir(m.path("d").c_str(), 0755)) == EPERM ? ESTALE : 1;
            }));
  EXPECT_FALSE(exists(m.bpath("d")));
  EXPECT_EQ(0, in_child([&] { return m.ctl("bind / 5"); })) << "equal is bound";
  EXPECT_EQ("5", xattr(m.mnt(), "user.fencefs.epoch"));
}

TEST(StaleBind, RefusedAtBindTimeByTheIoctl) {
  Mount m;
  ASSERT_EQ(0, advance(m, 5));
  EXPECT_EQ(ESTALE, in_child([&] {
              int dir = open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY);
              if (dir < 0) return 99;
              fencefs_token t{};
              t.epoch = 4;
              return E(ioctl(dir, FENCEFS_IOC_BIND, &t));
            }));
  EXPECT_EQ(0, in_child([&] {
              int dir = open(m.mnt().c_str(), O_RDONLY | O_DIRECTORY);
              fencefs_token t{};
              t.epoch = 5;
              return E(ioctl(dir, FENCEFS_IOC_BIND, &t));
            }));
}

TEST(StaleBind, FencectlRunRefusesBeforeTheCommandStarts) {
  Mount m;
  ASSERT_EQ(0, advance(m, 5));
  int st = -1;
  std::string out = sh_out(kCtl + " run --mount " + q(m.mnt()) + " --domain / --token 4 -- touch " +
                               q(m.root() + "/ran") + " 2>&1",
                           &st);
  EXPECT_EQ(201, st) << out;  // exit_code::kStale
  EXPECT_NE(std::string::npos, out.find("ESTALE")) << out;
  EXPECT_FALSE(exists(m.root() + "/ran")) << "the command must not run";
}

TEST(StaleBind, IsAuditedAndCountedAsAStaleRefusal) {
  Mount m;
  ASSERT_EQ(0, advance(m, 5));
  ASSERT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 3"); }));
  int st = -1;
  std::string rec =
      sh_out(kCtl + " audit --mount " + q(m.mnt()) +
                 " --decision refused --json | jq -c '[.op, .reason, .token, .epoch_before]'",
             &st);
  EXPECT_EQ(0, st);
  EXPECT_EQ("[\"bind\",\"stale\",\"3\",5]\n", rec);
  std::string metrics = slurp(m.path(".fencefs/metrics"));
  EXPECT_NE(std::string::npos, metrics.find("fencefs_operations_total{mount=\"" + m.mnt() +
                                            "\",domain=\"/\",result=\"stale\"} 1"))
      << metrics;
}

// ---------------------------------------------------------------------------------------------
// The control file, driven from a shell.

TEST(ControlFile, AShellReadsTheWholeReply) {
  Mount m;
  // The idiom documented in the README, line for line.
  int st = -1;
  std::string out =
      script(m,
             "exec 3<>$M/.fencefs/ctl\n"
             "echo \"advance / 5\" >&3; cat <&3     # ok: domain / advanced to epoch 5\n"
             "echo \"bind / 4\" >&3;    cat <&3     # (write error: Stale file handle) "
             "error: stale token 4 < epoch 5\n"
             "exec 3>&-\n",
             &st);
  EXPECT_EQ(0, st);
  EXPECT_EQ("ok: domain / advanced to epoch 5\nerror: stale token 4 < epoch 5\n", out);
  // Several commands on one descriptor, each reply whole; pread at 0 (fencectl's way) as well.
  out = script(m,
               "exec 3<>$M/.fencefs/ctl\n"
               "echo 'bind / 5' >&3; cat <&3\n"
               "echo 'unbind /' >&3; cat <&3\n");
  EXPECT_NE(std::string::npos, out.find("ok: bound pid ")) << out;
  EXPECT_NE(std::string::npos, out.find(" to token 5 for domain / (epoch 5)\nok: unbound pid "))
      << out;
  EXPECT_EQ(0, in_child([&] {
              int fd = open(m.ctl_path().c_str(), O_RDWR);
              if (fd < 0 || write(fd, "bind / 5\n", 9) != 9) return 1;
              char buf[256];
              ssize_t n = pread(fd, buf, sizeof buf, 0);
              return n > 4 && std::string(buf, 4) == "ok: " ? 0 : 2;
            }));
}

TEST(ControlFile, TwoLinesInOneWriteAreRefusedAndNothingIsApplied) {
  Mount m;
  EXPECT_EQ(EINVAL, in_child([&] { return m.ctl("advance / 5\nadvance / 6\n"); }));
  EXPECT_EQ(EINVAL, in_child([&] { return m.ctl("advance / 5\n\n"); }));
  EXPECT_EQ("0", xattr(m.mnt(), "user.fencefs.epoch"));
  // The same from a shell: coreutils printf writes both lines at once (bash's builtin would
  // write them one by one: one command per write, each applied).
  int st = -1;
  std::string out =
      script(m, "{ /usr/bin/printf 'advance / 7\\nbind / 7\\n' > $M/.fencefs/ctl; } 2>&1", &st);
  EXPECT_NE(0, st);
  EXPECT_NE(std::string::npos, out.find("Invalid argument")) << out;
  EXPECT_EQ("0", xattr(m.mnt(), "user.fencefs.epoch"));
}

// ---------------------------------------------------------------------------------------------
// Which token a caller presents: user.fencefs.token and fencectl whoami.

TEST(Whoami, TheTokenAttributeIsTheCallersOwn) {
  Mount m({"-o", "list_xattrs"}, [](const std::string& b) { spit(b + "/f", "x"); });
  EXPECT_EQ("ERR:" + std::string(strerror(ENODATA)), xattr(m.path("f"), "user.fencefs.token"));
  EXPECT_EQ(0, as_job(m, 3, [&] {
              if (xattr(m.path("f"), "user.fencefs.token") != "3") return 1;
              // A descendant presents its ancestor's token.
              return in_child([&] { return xattr(m.mnt(), "user.fencefs.token") == "3" ? 0 : 2; });
            }));
  // With -o list_xattrs, listed with the other inspection attributes, for getfattr -d.
  int st = -1;
  std::string out =
      sh_out(kCtl + " run --mount " + q(m.mnt()) +
                 " --domain / --token 4 -- getfattr -d -m user.fencefs " + q(m.path("f")),
             &st);
  EXPECT_EQ(0, st) << out;
  for (const char* line :
       {"user.fencefs.domain=\"/\"\n", "user.fencefs.epoch=\"0\"\n", "user.fencefs.token=\"4\"\n"})
    EXPECT_NE(std::string::npos, out.find(line)) << line << " missing from:\n" << out;
  out = sh_out("getfattr -d -m - " + q(m.path("f")) + " 2>&1", &st);
  EXPECT_EQ(0, st) << out;
  EXPECT_NE(std::string::npos, out.find("user.fencefs.epoch=\"0\"")) << out;
  EXPECT_EQ(std::string::npos, out.find("user.fencefs.token")) << "unbound: no token listed\n"
                                                               << out;
  EXPECT_EQ(std::string::npos, out.find("trusted.fencefs")) << out;
}

// By default listxattr leaves them out: rsync -X would try to remove them from every file it
// copies into the mount, and fail (exit 23).
TEST(Whoami, ListedOnlyWithListXattrsSoThatRsyncXWorks) {
  Mount m([] { return std::vector<std::string>{}; }(),
          [](const std::string& b) {
            ::mkdir((b + "/../src").c_str(), 0755);
            spit(b + "/../src/f", "x");
            setxattr((b + "/../src/f").c_str(), "user.k", "v", 1, 0);
          });
  int st = -1;
  std::string out =
      sh_out(kCtl + " run --mount " + q(m.mnt()) + " --domain / --token 2 -- rsync -aX " +
                 q(m.root() + "/src/") + " " + q(m.path("r/")) + " 2>&1",
             &st);
  EXPECT_EQ(0, st) << out;
  out = sh_out(kCtl + " run --mount " + q(m.mnt()) + " --domain / --token 2 -- rsync -aXI " +
                   q(m.root() + "/src/") + " " + q(m.path("r/")) + " 2>&1",
               &st);
  EXPECT_EQ(0, st) << "a second pass over existing files: " << out;
  EXPECT_EQ("v", xattr(m.path("r/f"), "user.k"));
  EXPECT_EQ("2", xattr(m.path("r/f"), "user.fencefs.epoch")) << "still readable by name";
  EXPECT_EQ(std::string::npos,
            sh_out("getfattr -d -m - " + q(m.path("r/f")) + " 2>/dev/null").find("user.fencefs."));
}

TEST(Whoami, InspectionAttributesCannotBeWrittenOrRemoved) {
  Mount m([] { return std::vector<std::string>{}; }(),
          [](const std::string& b) { spit(b + "/f", "x"); });
  EXPECT_EQ(0, as_job(m, 3, [&] {
              for (const char* n : {"user.fencefs.token", "user.fencefs.epoch", "user.fencefs.x"}) {
                if (E(setxattr(m.path("f").c_str(), n, "9", 1, 0)) != EPERM) return 1;
                if (E(removexattr(m.path("f").c_str(), n)) != EPERM) return 2;
              }
              return 0;
            }));
  EXPECT_EQ("", sh_out("getfattr -d -m user.fencefs " + q(m.bpath("f")) + " 2>/dev/null"))
      << "nothing reached BACKING";
}

TEST(Whoami, FencectlWhoamiSaysWhatThisShellPresents) {
  Mount m;
  int st = -1;
  EXPECT_EQ("domain / (epoch 0): no token (writes are refused with EPERM)\n",
            sh_out("cd " + q(m.mnt()) + " && " + kCtl + " whoami", &st));
  EXPECT_EQ(0, st);
  std::string json = script(m, "echo 'bind / 7' > $M/.fencefs/ctl && $CTL whoami $M --json", &st);
  EXPECT_EQ(0, st) << json;
  EXPECT_EQ("7 0 / " + m.mnt() + "\n",
            sh_out("echo " + q(json) +
                   " | jq -r '\"\\(.token_str) \\(.epoch_str) \\(.domain) \\(.mount)\"'"));
  // Bound to 8, superseded by 9 meanwhile: whoami says so before a write fails.
  EXPECT_EQ("domain / (epoch 9): token 8 (stale: writes are refused with ESTALE)\n",
            script(m,
                   "echo 'bind / 8' > $M/.fencefs/ctl\n"
                   "sh -c \"echo 'advance / 9' > $M/.fencefs/ctl\"\n"
                   "$CTL whoami $M\n"));
  sh_out(kCtl + " whoami /proc 2>&1", &st);
  EXPECT_EQ(205, st);  // not a fencefs mount
}

// ---------------------------------------------------------------------------------------------
// Domain paths with spaces and UTF-8: quoted in the control file, plain in fencectl.

TEST(QuotedDomains, SpacesAndUtf8RoundTripThroughTheControlFileAndFencectl) {
  const std::string spaced = "/my data", utf8 = "/caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";
  Mount m([] { return std::vector<std::string>{}; }(),
          [&](const std::string& b) {
            ::mkdir((b + spaced).c_str(), 0755);
            ::mkdir((b + utf8).c_str(), 0755);
          });
  int st = -1;
  std::string out = sh_out(kCtl + " domain add " + q(m.path(spaced.substr(1))) + " 2>&1", &st);
  EXPECT_EQ(0, st) << out;
  // The shell's way: quoted, as in the README.
  EXPECT_EQ(0, sh("echo 'domain add \"" + utf8 + "\"' > " + q(m.ctl_path())));
  std::string paths =
      sh_out(kCtl + " status --json --mount " + q(m.mnt()) + " | jq -r '.domains[].path' | sort");
  EXPECT_EQ("/\n" + utf8 + "\n" + spaced + "\n", paths);
  EXPECT_EQ(spaced, xattr(m.path(spaced.substr(1)), "user.fencefs.domain"));
  EXPECT_EQ(utf8, xattr(m.path(utf8.substr(1)), "user.fencefs.domain"));
  // bind through the control file, fencectl run (ioctl), advance and whoami.
  EXPECT_EQ("", script(m,
                       "echo 'bind \"" + spaced + "\" 2' > $M/.fencefs/ctl && touch \"$M" + spaced +
                           "/by-shell\"\n",
                       &st));
  EXPECT_EQ(0, st);
  EXPECT_EQ("2", xattr(m.path(spaced.substr(1)), "user.fencefs.epoch"));
  out = sh_out(kCtl + " run --mount " + q(m.mnt()) + " --domain " + q(utf8) + " --token 3 -- " +
                   kCtl + " whoami " + q(m.path(utf8.substr(1))) + " --json",
               &st);
  EXPECT_EQ(0, st) << out;
  EXPECT_EQ(utf8 + " 3\n", sh_out("echo " + q(out) + " | jq -r '\"\\(.domain) \\(.token_str)\"'"));
  EXPECT_EQ(0, sh(kCtl + " advance --mount " + q(m.mnt()) + " " + q(utf8) + " 5 >/dev/null"));
  EXPECT_EQ(0, sh(kCtl + " advance --force --mount " + q(m.mnt()) + " " + q(spaced) +
                  " 5000000 >/dev/null"));
  EXPECT_EQ("5", xattr(m.path(utf8.substr(1)), "user.fencefs.epoch"));
  EXPECT_EQ("5000000", xattr(m.path(spaced.substr(1)), "user.fencefs.epoch"));
  // The audit trail and the metrics name them as they are.
  out = sh_out(kCtl + " audit --mount " + q(m.mnt()) + " --domain " + q(utf8) +
               " --decision declared --json | jq -r .domain");
  EXPECT_EQ(utf8 + "\n", out);
  std::string metrics = slurp(m.path(".fencefs/metrics"));
  EXPECT_NE(std::string::npos,
            metrics.find("fencefs_epoch{mount=\"" + m.mnt() + "\",domain=\"" + utf8 + "\"} 5\n"))
      << metrics;
}

// ---------------------------------------------------------------------------------------------
// Metrics as Prometheus reads them.

TEST(Metrics, PromtoolAcceptsThePageAndEverySeriesNamesItsMount) {
  Mount m;
  ASSERT_EQ(0, advance(m, 3));
  ASSERT_EQ(0, ::mkdir(m.bpath("we\"ird dir").c_str(), 0755));
  ASSERT_EQ(0, sh(kCtl + " domain add " + q(m.path("we\"ird dir")) + " >/dev/null"));
  // The textfile-collector idiom from the README: copy, then rename into place.
  std::string dir = m.root() + "/textfile";
  ASSERT_EQ(0, ::mkdir(dir.c_str(), 0755));
  std::string copy = "cp " + q(m.path(".fencefs/metrics")) + " " + q(dir + "/fencefs.prom.tmp") +
                     " && mv " + q(dir + "/fencefs.prom.tmp") + " " + q(dir + "/fencefs.prom");
  ASSERT_EQ(0, sh(copy));
  int st = -1;
  std::string lint = sh_out("promtool check metrics < " + q(dir + "/fencefs.prom") + " 2>&1", &st);
  EXPECT_EQ(0, st) << lint;
  EXPECT_EQ("", lint);
  std::string text = slurp(dir + "/fencefs.prom");
  size_t samples = 0;
  std::string label = "{mount=\"" + m.mnt() + "\"";
  for (size_t at = 0; at < text.size();) {
    size_t eol = text.find('\n', at);
    std::string line = text.substr(at, eol - at);
    at = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    samples++;
    EXPECT_NE(std::string::npos, line.find(label)) << line;
  }
  EXPECT_GT(samples, 20u);
  EXPECT_NE(std::string::npos, text.find(label + ",version=\"" FENCEFS_VERSION "\",libfuse=\""))
      << text;
  EXPECT_NE(std::string::npos,
            text.find("fencefs_last_advance_timestamp_seconds" + label + ",domain=\"/\"} "))
      << text;
  EXPECT_EQ(std::string::npos,
            text.find("fencefs_last_advance_timestamp_seconds" + label + ",domain=\"/we"))
      << "a domain never advanced has no timestamp";
}

// The value of `series` (its whole name and labels, up to the space) on the metrics page.
static std::string sample(const std::string& page, const std::string& series) {
  size_t at = page.find("\n" + series + " ");
  if (at == std::string::npos) return "";
  at += series.size() + 2;
  return page.substr(at, page.find('\n', at) - at);
}

TEST(Metrics, LastAdvanceTimesSurviveARestart) {
  Mount m;
  ASSERT_EQ(0, advance(m, 3));
  ASSERT_EQ(0, ::mkdir(m.bpath("b").c_str(), 0755));
  ASSERT_EQ(0, sh(kCtl + " domain add " + q(m.path("b")) + " >/dev/null"));
  std::string series = "fencefs_last_advance_timestamp_seconds{mount=\"" + m.mnt() + "\",domain=";
  std::string before = sample(slurp(m.path(".fencefs/metrics")), series + "\"/\"}");
  ASSERT_NE("", before);
  ASSERT_EQ(0, m.unmount()) << m.daemon_log();
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  std::string page = slurp(m.path(".fencefs/metrics"));
  // From the audit's epochs.jsonl: the same second (the record keeps microseconds, the page ms).
  std::string after = sample(page, series + "\"/\"}");
  ASSERT_NE("", after) << page;
  EXPECT_NEAR(std::stod(before), std::stod(after), 0.002) << before << " vs " << after;
  EXPECT_EQ("", sample(page, series + "\"/b\"}")) << "a domain never advanced has no time";
}

// ---------------------------------------------------------------------------------------------
// fencectl's messages and exit statuses, as a script sees them.

TEST(FencectlMessages, AdvanceToTheCurrentEpochSaysAlready) {
  Mount m;
  int st = -1;
  std::string out = script(m, "$CTL advance -m $M / 6 && $CTL advance -m $M / 6", &st);
  EXPECT_EQ(0, st);
  EXPECT_EQ("domain / advanced to epoch 6\ndomain / already at epoch 6\n", out);
  // As --force (the control file) says it.
  EXPECT_EQ("domain / already at epoch 6\n", script(m, "$CTL advance -m $M / 6 --force"));
}

TEST(FencectlMessages, APathThatDoesNotExistIsAUsageErrorNamingTheErrno) {
  Mount m;
  int st = -1;
  for (std::string cmd : {"whoami $M/nonexist", "advance --mount /nonexistent / 9",
                          "status --mount $M/nonexist", "domain add $M/nonexist"}) {
    std::string out = script(m, "$CTL " + cmd + " 2>&1", &st);
    EXPECT_EQ(200, st) << cmd << ": " << out;
    EXPECT_NE(std::string::npos, out.find("nonexist"));
    EXPECT_NE(std::string::npos, out.find(": No such file or directory\n")) << cmd << ": " << out;
    EXPECT_EQ(std::string::npos, out.find("not a fencefs mount")) << cmd << ": " << out;
  }
}

// The bash completion offers every command, every lease verb, and every long option each
// command's --help lists (run through the completion function itself, as bash would).
TEST(FencectlMessages, BashCompletionOffersWhatEveryHelpLists) {
  std::string dir = temp_dir("completion");
  ASSERT_NE("", dir);
  std::string file = dir + "/check.sh";
  spit(file, "CTL=" + q(kCtl) + "\nsource " + q(std::string(FENCEFS_SOURCE_DIR)) +
                 "/packaging/fencectl.bash\n" + R"(
offered() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _fencectl; printf '%s\n' "${COMPREPLY[@]}"; }
cmds="run lease advance sign domain status whoami audit verify recover"
for c in $cmds; do offered fencectl "" | grep -qx "$c" || echo "command $c"; done
for v in acquire keepalive release; do offered fencectl lease "" | grep -qx "$v" || echo "lease $v"; done
for c in $cmds; do
  have=$(offered fencectl "$c" --; [ "$c" != lease ] || for v in acquire keepalive release; do offered fencectl lease "$v" --; done)
  for o in $($CTL "$c" --help | grep -o -- '--[a-z][a-z-]*' | sort -u); do
    grep -qx -- "$o" <<<"$have" || echo "$c $o"
  done
done
)");
  int st = -1;
  EXPECT_EQ("", sh_out("bash " + q(file) + " 2>&1", &st)) << "missing from the completion";
  EXPECT_EQ(0, st);
  sh("rm -rf " + q(dir));
}

// sign refuses the domain texts advance refuses: a token for them could never be bound.
TEST(FencectlMessages, SignRefusesADomainAdvanceRefuses) {
  Mount m;
  spit(m.root() + "/key", "k3y");
  std::string sign = "$CTL sign --key " + q(m.root() + "/key") + " --epoch 3 --domain ";
  int st = -1;
  for (std::string d : {"nodom", "/a//b", "/a/../b"}) {
    std::string advanced = script(m, "$CTL advance -m $M " + q(d) + " 3 2>&1", &st);
    EXPECT_EQ(204, st) << d << ": " << advanced;
    std::string signed_ = script(m, sign + q(d) + " 2>&1", &st);
    EXPECT_EQ(204, st) << d << ": " << signed_;
    ASSERT_EQ(0u, advanced.rfind("fencectl: advance: ", 0)) << advanced;
    EXPECT_EQ("fencectl: sign: " + advanced.substr(19), signed_) << d;
  }
  EXPECT_EQ("fencectl: sign: domain 'nodom' must be a path from the mount root, like / or /jobs\n",
            script(m, sign + "nodom 2>&1"));
  std::string token = script(m, sign + "/ 2>&1", &st);
  EXPECT_EQ(0, st) << token;
  EXPECT_EQ(0u, token.rfind("3.", 0)) << token;
  EXPECT_EQ("0", xattr(m.mnt(), "user.fencefs.epoch"));
  // A trailing slash, as a shell's completion adds it, names the same domain.
  ASSERT_EQ(0, ::mkdir(m.bpath("jobs").c_str(), 0755));
  ASSERT_EQ(
      0, st = sh(std::string(FENCECTL_BIN) + " domain add " + q(m.path("jobs")) + " >/dev/null"));
  EXPECT_EQ(script(m, sign + "/jobs 2>&1"), script(m, sign + "/jobs/ 2>&1", &st));
  EXPECT_EQ(0, st);
  script(m, "$CTL advance -m $M /jobs/ 3 2>&1", &st);
  EXPECT_EQ(0, st);
  EXPECT_EQ("3", xattr(m.path("jobs"), "user.fencefs.epoch"));
  EXPECT_EQ(
      "/jobs\n",
      script(m,
             "$CTL run --mount $M --domain /jobs/ --token 3 -- sh -c 'echo $FENCEFS_DOMAIN' 2>&1",
             &st));
  EXPECT_EQ(0, st);
}

// ---------------------------------------------------------------------------------------------
// The documents say what the binaries do.

namespace {

std::string squeeze(const std::string& s) {  // runs of whitespace as one space
  std::string out;
  for (char c : s)
    if (!isspace(static_cast<unsigned char>(c)))
      out += c;
    else if (!out.empty() && out.back() != ' ')
      out += ' ';
  return out;
}

}  // namespace

TEST(Docs, StatusJsonExampleAndDefaultIssuersMatchTheBinaries) {
  Mount m;
  const std::string src = FENCEFS_SOURCE_DIR;
  // docs/status-json.md's example: the root domain's id, and top-level members a mount has.
  std::string example = m.root() + "/example.json";
  ASSERT_EQ(0, sh("awk '/^```json$/{c=1;next} c&&/^```$/{exit} c{print}' " +
                  q(src + "/docs/status-json.md") + " > " + q(example)));
  int st = -1;
  std::string live =
      script(m,
             "$CTL status -m $M --json > $M/../live.json && cd $M/.. && "
             "jq -r '.domains[0].path, .domains[0].id, (keys|join(\" \"))' live.json",
             &st);
  ASSERT_EQ(0, st) << live;
  std::string doc =
      sh_out("jq -r '.domains[0].path, .domains[0].id, (keys|join(\" \"))' " + q(example));
  EXPECT_EQ(live, doc);
  // The issuers' default: as `fencefs --help` gives it, so the README.
  std::string help = squeeze(sh_out(std::string(FENCEFS_BIN) + " --help"));
  size_t at = help.find("(default: ", help.find("issuers=LIST"));
  ASSERT_NE(std::string::npos, at) << help;
  at += 10;
  std::string dflt = help.substr(at, help.find(')', at) - at);
  EXPECT_EQ("root and the user who mounted", dflt);
  std::string readme = squeeze(slurp(src + "/README.md"));
  EXPECT_NE(std::string::npos, readme.find("(`-o issuers=…`, default " + dflt + ")"))
      << "README's Issuers paragraph";
}
