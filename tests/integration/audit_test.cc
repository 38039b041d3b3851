// The audit trail, fencectl audit/status/verify/recover, and the metrics page, on real
// mounts. docs/audit.md describes what is checked here.
#include "audit/audit.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/json.h"
#include "fence/stamp.h"
#include "fencefs/ioctl.h"
#include "integration/mount_fixture.h"

using namespace fencefs::testing;
using fencefs::json::Value;

namespace {

const std::string kCtl = FENCECTL_BIN;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

std::string state_dir(const Mount& m) { return m.bpath(".fencefs"); }

// Every record of the trail, oldest first; a line that does not parse fails the test.
std::vector<Value> records(const std::string& state) {
  std::vector<Value> out;
  for (const std::string& f : fencefs::audit::log_files(state)) {
    for (const std::string& l : lines_of(slurp(f))) {
      std::string err;
      auto v = fencefs::json::parse(l, &err);
      EXPECT_TRUE(v.has_value()) << f << ": " << err << ": " << l;
      if (v) out.push_back(std::move(*v));
    }
  }
  return out;
}

std::string S(const Value& v, const char* k) {
  const Value* x = v.get(k);
  return x ? x->as_string() : std::string("<absent>");
}
uint64_t N(const Value& v, const char* k) {
  const Value* x = v.get(k);
  return x ? x->as_u64() : ~0ull;
}

std::vector<Value> where(const std::vector<Value>& recs,
                         const std::function<bool(const Value&)>& p) {
  std::vector<Value> out;
  for (const auto& r : recs)
    if (p(r)) out.push_back(r);
  return out;
}

std::vector<Value> refusals(const Mount& m) {
  return where(records(state_dir(m)), [](const Value& r) { return S(r, "decision") == "refused"; });
}

std::string dump(const std::vector<Value>& recs) {
  std::string out;
  for (const auto& r : recs)
    out += S(r, "op") + " " + S(r, "decision") + " " + S(r, "reason") + " " + S(r, "path") + " " +
           S(r, "message") + "\n";
  return out;
}

// The fields every record carries, with the right types.
void expect_complete(const Value& r) {
  for (const char* k : {"time", "op", "decision", "reason", "domain", "path", "token", "error",
                        "comm", "message"}) {
    const Value* x = r.get(k);
    ASSERT_TRUE(x) << "missing " << k;
    EXPECT_EQ(Value::Type::String, x->type) << k;
  }
  for (const char* k : {"epoch_before", "epoch_after", "errno", "pid", "uid", "gid"}) {
    const Value* x = r.get(k);
    ASSERT_TRUE(x) << "missing " << k;
    EXPECT_EQ(Value::Type::Number, x->type) << k;
  }
  EXPECT_TRUE(fencefs::audit::parse_iso_time(S(r, "time")).has_value()) << S(r, "time");
}

// Forks fn() in a child; returns its exit status and (in *pid) its pid.
int child(const std::function<int()>& fn, pid_t* pid) {
  fflush(nullptr);
  pid_t p = fork();
  if (p == 0) {
    int rc = 1;
    try {
      rc = fn();
    } catch (...) {
      rc = 99;
    }
    _exit(rc);
  }
  if (pid) *pid = p;
  int st;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int as_job(const Mount& m, uint64_t token, const std::function<int()>& fn, pid_t* pid) {
  return child(
      [&] {
        if (token && m.ctl("bind / " + std::to_string(token)) != 0) return 200;
        return fn();
      },
      pid);
}

// Creates (or rewrites) rel with data under token; returns an errno.
int write_file(const Mount& m, uint64_t token, const std::string& rel, const std::string& data) {
  return as_job(m, token, [&] {
    int fd = open(m.path(rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return errno;
    if (write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) return errno;
    return close(fd) == 0 ? 0 : errno;
  });
}

std::string stamp_of(const std::string& backing_path) {
  char buf[256];
  ssize_t n = lgetxattr(backing_path.c_str(), "trusted.fencefs", buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
}

// The stamp is rewritten at release, which the kernel sends after close(2) returns: wait for it.
bool wait_stamp(const std::string& backing_path, uint64_t size) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    struct stat st;
    auto s = fencefs::fence::decode_stamp(stamp_of(backing_path));
    if (s && s->has_size && s->size == size && s->has_mtime &&
        stat(backing_path.c_str(), &st) == 0 && s->mtime_sec == st.st_mtim.tv_sec &&
        s->mtime_nsec == st.st_mtim.tv_nsec)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string ctl_cmd(const std::string& args) { return kCtl + " " + args; }

// Runs fencectl and parses its stdout as one JSON object.
std::optional<Value> ctl_json(const std::string& args, int* status) {
  std::string out = sh_out(ctl_cmd(args), status);
  std::string err;
  auto v = fencefs::json::parse(out, &err);
  EXPECT_TRUE(v.has_value()) << "fencectl " << args << ": " << err << "\n" << out;
  return v;
}

std::vector<std::string> finding_kinds(const Value& report) {
  std::vector<std::string> out;
  if (const Value* f = report.get("findings"))
    for (const auto& x : f->arr) out.push_back(S(x, "kind") + " " + S(x, "path"));
  return out;
}

// `fencectl verify BACKING --json`: its exit status, and its findings as "KIND PATH".
std::pair<int, std::vector<std::string>> verify_backing(const Mount& m) {
  int st = -1;
  auto v = ctl_json("verify '" + m.backing() + "' --json", &st);
  return {st, v ? finding_kinds(*v) : std::vector<std::string>{"unparsed"}};
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The state of `m` is put back to a copy taken at epoch 1, while /f carries a stamp of epoch 5.
// Leaves m unmounted.
void roll_back(Mount& m) {
  ASSERT_EQ(0, write_file(m, 1, "f", "one"));
  ASSERT_TRUE(wait_stamp(m.bpath("f"), 3));
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("cp -a '" + state_dir(m) + "' '" + m.root() + "/old-state'"));
  ASSERT_TRUE(m.remount());
  ASSERT_EQ(0, write_file(m, 5, "f", "five!"));
  ASSERT_TRUE(wait_stamp(m.bpath("f"), 5));
  ASSERT_EQ(0, m.unmount());
  ASSERT_EQ(0, sh("rm -rf '" + state_dir(m) + "' && cp -a '" + m.root() + "/old-state' '" +
                  state_dir(m) + "'"));
}

// --- A validator of the Prometheus text exposition format (version 0.0.4) ---------------------

struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value;
};

struct PromFamily {
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::vector<PromSample> samples;
};

bool valid_metric_name(const std::string& s) {
  static const std::regex re("[a-zA-Z_:][a-zA-Z0-9_:]*");
  return std::regex_match(s, re);
}
bool valid_label_name(const std::string& s) {
  static const std::regex re("[a-zA-Z_][a-zA-Z0-9_]*");
  return std::regex_match(s, re) && s.rfind("__", 0) != 0;
}

bool parse_value(const std::string& s, double* v) {
  if (s == "+Inf" || s == "Inf") return *v = INFINITY, true;
  if (s == "-Inf") return *v = -INFINITY, true;
  if (s == "NaN") return *v = NAN, true;
  static const std::regex re("[-+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][-+]?[0-9]+)?");
  if (!std::regex_match(s, re)) return false;
  *v = strtod(s.c_str(), nullptr);
  return true;
}

// Returns "" when `text` is valid, else the first problem found. *out receives the families.
std::string validate_prometheus(const std::string& text, std::map<std::string, PromFamily>* out) {
  std::map<std::string, PromFamily> fam;
  std::set<std::string> helped, finished, series;
  std::string current;  // family whose samples are being read
  if (!text.empty() && text.back() != '\n') return "does not end with a newline";
  auto family_of = [&](const std::string& name) -> std::string {
    if (fam.count(name)) return name;
    for (const char* suf : {"_bucket", "_sum", "_count"}) {
      size_t n = strlen(suf);
      if (name.size() > n && name.compare(name.size() - n, n, suf) == 0) {
        std::string base = name.substr(0, name.size() - n);
        auto it = fam.find(base);
        if (it != fam.end() && (it->second.type == "histogram" || it->second.type == "summary"))
          return base;
      }
    }
    return "";
  };
  int lineno = 0;
  for (const std::string& line : lines_of(text)) {
    lineno++;
    std::string where = "line " + std::to_string(lineno) + " '" + line + "': ";
    if (line[0] == '#') {
      std::istringstream in(line);
      std::string hash, kw, name;
      in >> hash >> kw >> name;
      if (hash != "#" || (kw != "HELP" && kw != "TYPE")) continue;  // a plain comment
      if (!valid_metric_name(name)) return where + "bad metric name in " + kw;
      if (kw == "HELP") {
        if (!helped.insert(name).second) return where + "second HELP for " + name;
        continue;
      }
      std::string type, extra;
      in >> type >> extra;
      if (!extra.empty()) return where + "trailing text after the type";
      static const std::set<std::string> kTypes = {"counter", "gauge", "histogram", "summary",
                                                   "untyped"};
      if (!kTypes.count(type)) return where + "unknown type " + type;
      if (fam.count(name)) return where + "second TYPE line for " + name;
      if (finished.count(name) || series.count(name))
        return where + "TYPE after samples of " + name;
      fam[name].type = type;
      continue;
    }
    // name{labels} value [timestamp]
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') i++;
    PromSample s;
    s.name = line.substr(0, i);
    if (!valid_metric_name(s.name)) return where + "bad metric name";
    std::string label_key;
    if (i < line.size() && line[i] == '{') {
      i++;
      while (true) {
        if (i < line.size() && line[i] == '}') {
          i++;
          break;
        }
        size_t eq = line.find('=', i);
        if (eq == std::string::npos) return where + "label without '='";
        std::string ln = line.substr(i, eq - i);
        if (!valid_label_name(ln)) return where + "bad label name '" + ln + "'";
        i = eq + 1;
        if (i >= line.size() || line[i] != '"') return where + "label value not quoted";
        i++;
        std::string val;
        bool closed = false;
        while (i < line.size()) {
          char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (i >= line.size()) return where + "dangling backslash";
            char e = line[i++];
            if (e == 'n') {
              val += '\n';
            } else if (e == '\\' || e == '"') {
              val += e;
            } else {
              return where + "bad escape \\" + std::string(1, e) + " in a label value";
            }
            continue;
          }
          val += c;
        }
        if (!closed) return where + "unterminated label value";
        for (auto& [k, v] : s.labels)
          if (k == ln) return where + "label " + ln + " twice";
        s.labels.emplace_back(ln, val);
        if (i < line.size() && line[i] == ',') {
          i++;
          continue;
        }
        if (i < line.size() && line[i] == '}') {
          i++;
          break;
        }
        return where + "expected ',' or '}' after a label";
      }
    }
    if (i >= line.size() || line[i] != ' ') return where + "no space before the value";
    std::istringstream rest(line.substr(i + 1));
    std::string value, ts, extra;
    rest >> value >> ts >> extra;
    if (!parse_value(value, &s.value)) return where + "bad value '" + value + "'";
    if (!ts.empty() && !std::regex_match(ts, std::regex("-?[0-9]+")))
      return where + "bad timestamp";
    if (!extra.empty()) return where + "trailing text";
    std::string f = family_of(s.name);
    if (f.empty()) return where + "sample before (or without) a TYPE line for its family";
    if (f != current) {
      if (finished.count(f)) return where + "samples of " + f + " are not contiguous";
      if (!current.empty()) finished.insert(current);
      current = f;
    }
    std::vector<std::pair<std::string, std::string>> sorted = s.labels;
    std::sort(sorted.begin(), sorted.end());
    std::string id = s.name;
    for (auto& [k, v] : sorted) id += "|" + k + "=" + v;
    if (!series.insert(id).second) return where + "duplicate series";
    fam[f].samples.push_back(std::move(s));
  }
  for (auto& [name, f] : fam) {
    if (f.type == "counter") {
      if (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0)
        return "counter " + name + " does not end in _total";
      for (auto& s : f.samples)
        if (s.value < 0 || std::isnan(s.value)) return "counter " + name + " is negative or NaN";
    }
    if (f.type == "histogram") {
      // Per label set (without le): cumulative buckets, +Inf == _count, and a _sum.
      struct Series {
        std::vector<std::pair<double, double>> buckets;
        bool sum = false, count = false;
        double count_value = 0;
      };
      std::map<std::string, Series> by;
      for (auto& s : f.samples) {
        std::string key, le;
        bool has_le = false;
        for (auto& [k, v] : s.labels) {
          if (k == "le") {
            le = v;
            has_le = true;
          } else {
            key += k + "=" + v + ",";
          }
        }
        Series& se = by[key];
        if (s.name == name + "_bucket") {
          double bound;
          if (!has_le || !parse_value(le, &bound)) return "histogram " + name + ": bad le";
          se.buckets.emplace_back(bound, s.value);
        } else if (s.name == name + "_sum") {
          if (has_le) return "histogram " + name + ": le on _sum";
          se.sum = true;
        } else if (s.name == name + "_count") {
          if (has_le) return "histogram " + name + ": le on _count";
          se.count = true;
          se.count_value = s.value;
        } else {
          return "histogram " + name + ": stray sample " + s.name;
        }
      }
      if (by.empty()) return "histogram " + name + " has no samples";
      for (auto& [key, se] : by) {
        if (!se.sum || !se.count) return "histogram " + name + "{" + key + "} lacks _sum/_count";
        if (se.buckets.empty() || !std::isinf(se.buckets.back().first))
          return "histogram " + name + "{" + key + "} lacks a last le=\"+Inf\" bucket";
        for (size_t k = 1; k < se.buckets.size(); k++) {
          if (!(se.buckets[k].first > se.buckets[k - 1].first))
            return "histogram " + name + "{" + key + "}: le not increasing";
          if (se.buckets[k].second < se.buckets[k - 1].second)
            return "histogram " + name + "{" + key + "}: buckets not cumulative";
        }
        if (se.buckets.back().second != se.count_value)
          return "histogram " + name + "{" + key + "}: +Inf bucket != _count";
      }
    }
  }
  if (out) *out = std::move(fam);
  return "";
}

double sample_value(const std::map<std::string, PromFamily>& fam, const std::string& family,
                    const std::map<std::string, std::string>& labels) {
  auto it = fam.find(family);
  if (it == fam.end()) return -1;
  for (auto& s : it->second.samples) {
    bool ok = true;
    for (auto& [k, v] : labels) {
      auto l = std::find_if(s.labels.begin(), s.labels.end(),
                            [&key = k](auto& x) { return x.first == key; });
      if (l == s.labels.end() || l->second != v) ok = false;
    }
    if (ok) return s.value;
  }
  return -1;
}

}  // namespace

// --- The audit library on its own (no mount) ---------------------------------------------------

TEST(AuditFormat, EscapingRoundTripsThroughJson) {
  fencefs::audit::Event e;
  e.op = "write";
  e.decision = "refused";
  const char kPath[] = "/caf\xc3\xa9/q\"uote\\back\nline\x01/bad\xff\xfe";
  e.path = std::string(kPath, sizeof kPath - 1);
  e.comm = "a\tb";
  std::string line = fencefs::audit::to_json(e, 1796205600123456789);
  ASSERT_EQ('\n', line.back());
  EXPECT_EQ(line.size() - 1, line.find('\n')) << "one line";
  EXPECT_NE(std::string::npos, line.find("/caf\xc3\xa9/")) << "valid UTF-8 passes through";
  EXPECT_NE(std::string::npos, line.find("\\udcff\\udcfe")) << line;
  EXPECT_NE(std::string::npos, line.find("\\u0001")) << line;
  std::string err;
  auto v = fencefs::json::parse(line, &err);
  ASSERT_TRUE(v) << err;
  EXPECT_EQ("2026-12-02T10:00:00.123456Z", S(*v, "time"));
  EXPECT_EQ(e.path, S(*v, "path"));  // the stray bytes too
  EXPECT_EQ("a\tb", S(*v, "comm"));
  EXPECT_EQ(0u, N(*v, "errno"));
  EXPECT_EQ("", S(*v, "error"));
  EXPECT_EQ("<absent>", S(*v, "path2"));
  EXPECT_EQ("<absent>", S(*v, "tid"));
}

// Lines are hash-chained and read by scripts: the bytes of a record are pinned, member order
// and all (every optional member present).
TEST(AuditFormat, ExactBytesOfAFullRecord) {
  fencefs::audit::Event e;
  e.op = "rename";
  e.decision = "refused";
  e.reason = "stale";
  e.domain = "/d";
  e.path = "/a\xff";
  e.path2 = "/b\"c";
  e.token = "3";
  e.epoch_before = UINT64_MAX;
  e.epoch_after = 7;
  e.err = ESTALE;
  e.pid = 10;
  e.tid = 11;
  e.uid = 4294967294u;
  e.gid = 5;
  e.comm = "sh";
  e.message = "m";
  EXPECT_EQ(R"({"time":"2026-12-02T10:00:00.123456Z","op":"rename","decision":"refused",)"
            R"("reason":"stale","domain":"/d","path":"/a\udcff","path2":"/b\"c","token":"3",)"
            R"("epoch_before":18446744073709551615,"epoch_before_str":"18446744073709551615",)"
            R"("epoch_after":7,"epoch_after_str":"7","errno":116,"error":"ESTALE",)"
            R"("pid":10,"tid":11,"uid":4294967294,"gid":5,"comm":"sh","message":"m"})"
            "\n",
            fencefs::audit::to_json(e, 1796205600123456789));
}

TEST(AuditFormat, Times) {
  using fencefs::audit::parse_iso_time;
  using fencefs::audit::parse_since;
  const int64_t s = 1000000000;
  EXPECT_EQ(1796205600 * s, parse_iso_time("2026-12-02T10:00:00Z"));
  EXPECT_EQ(1796205600 * s, parse_iso_time("2026-12-02T12:00:00+02:00"));
  EXPECT_EQ(1796205600 * s, parse_iso_time("2026-12-02T05:00:00-0500"));
  EXPECT_EQ(1796205600 * s, parse_iso_time("2026-12-02 10:00"));
  EXPECT_EQ(1796205600 * s + 123456000, parse_iso_time("2026-12-02T10:00:00.123456Z"));
  EXPECT_EQ(1796169600 * s, parse_iso_time("2026-12-02"));
  for (const char* bad :
       {"", "2026-12-02T", "2026-13-01", "2026-02-30", "2026-12-02T25:00", "2026-12-02T10:00:00Q",
        "yesterday", "12/02/2026", "2026-12-02T10:00:00."})
    EXPECT_FALSE(parse_iso_time(bad).has_value()) << bad;
  int64_t now = 1796205600 * s;
  EXPECT_EQ(now - 90 * s, parse_since("90s", now));
  EXPECT_EQ(now - 600 * s, parse_since("10m", now));
  EXPECT_EQ(now - 7200 * s, parse_since("2h", now));
  EXPECT_EQ(now - 86400 * s, parse_since("1d", now));
  EXPECT_EQ(now - 7 * 86400 * s, parse_since("1w", now));
  EXPECT_EQ(1796205600 * s, parse_since("2026-12-02T10:00:00Z", now));
  for (const char* bad : {"m", "10", "-1h", "10x", "1.5h", "99999999999999999999d"})
    EXPECT_FALSE(parse_since(bad, now).has_value()) << bad;
}

TEST(AuditFormat, LogRotatesAndRecordsGaps) {
  std::string dir = temp_dir("auditlog");
  {
    // Leftovers of a mount with a larger audit_keep go at the first rotation.
    spit(dir + "/audit.log.7", "{}\n");
    fencefs::audit::Log log({dir, 600, 2});
    fencefs::audit::Event e;
    e.op = "mkdir";
    e.decision = "refused";
    e.reason = "missing";
    for (int i = 0; i < 20; i++) {
      e.path = "/d" + std::to_string(i);
      EXPECT_EQ(fencefs::audit::Log::Outcome::kWritten, log.record(e));
    }
    auto files = fencefs::audit::log_files(dir);
    ASSERT_EQ(3u, files.size());
    EXPECT_EQ(dir + "/audit.log.2", files[0]);
    EXPECT_EQ(dir + "/audit.log.1", files[1]);
    EXPECT_EQ(dir + "/audit.log", files[2]);
    for (auto& f : files) EXPECT_LE(slurp(f).size(), 600u) << f;
    auto recs = records(dir);
    EXPECT_EQ("/d19", S(recs.back(), "path"));
    EXPECT_GT(log.rotations(), 0u);
    // ESTALE refusals repeated by the same thread within a second are written once.
    e.err = ESTALE;
    e.pid = getpid();
    e.reason = "stale";
    e.path = "/x";
    EXPECT_EQ(fencefs::audit::Log::Outcome::kWritten, log.record(e));
    EXPECT_EQ(fencefs::audit::Log::Outcome::kRepeat, log.record(e));
    e.path = "/y";
    EXPECT_EQ(fencefs::audit::Log::Outcome::kWritten, log.record(e));
    EXPECT_EQ(1u, log.repeats());
  }
  {
    std::string gone = dir + "/missing";
    fencefs::audit::Log log({gone, 1 << 20, 2});
    fencefs::audit::Event e;
    e.op = "bind";
    e.decision = "refused";
    EXPECT_EQ(fencefs::audit::Log::Outcome::kFailed, log.record(e));
    EXPECT_EQ(fencefs::audit::Log::Outcome::kFailed, log.record(e));
    EXPECT_GE(log.failures(), 2u);
    ASSERT_EQ(0, mkdir(gone.c_str(), 0700));
    e.path = "/after";
    EXPECT_EQ(fencefs::audit::Log::Outcome::kWritten, log.record(e));
    auto recs = records(gone);
    ASSERT_EQ(2u, recs.size());
    EXPECT_EQ("lost", S(recs[0], "reason"));
    EXPECT_NE(std::string::npos, S(recs[0], "message").find("2 audit record(s)"))
        << S(recs[0], "message");
    EXPECT_EQ("/after", S(recs[1], "path"));
  }
  sh("rm -rf '" + dir + "'");
}

// --- One record per refusal, with the right fields ---------------------------------------------

TEST(AuditRecord, StaleWriteThroughAHandle) {
  Mount m;
  int ready[2], go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  pid_t holder = fork();
  if (holder == 0) {
    if (m.ctl("bind / 1") != 0) _exit(10);
    int fd = open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(11);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(12);
    _exit(E(write(fd, "late", 4)) == ESTALE ? 0 : 13);
  }
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1));
  ASSERT_EQ(0, sh(ctl_cmd("advance --mount '" + m.mnt() + "' / 2 >/dev/null")));
  ASSERT_EQ(1, write(go[1], "g", 1));
  int st;
  waitpid(holder, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << WEXITSTATUS(st);
  auto refused = refusals(m);
  ASSERT_EQ(1u, refused.size()) << dump(refused);
  const Value& r = refused[0];
  expect_complete(r);
  EXPECT_EQ("write", S(r, "op"));
  EXPECT_EQ("stale", S(r, "reason"));
  EXPECT_EQ("/", S(r, "domain"));
  EXPECT_EQ("/f", S(r, "path"));
  EXPECT_EQ("1", S(r, "token"));
  EXPECT_EQ(2u, N(r, "epoch_before"));
  EXPECT_EQ(2u, N(r, "epoch_after"));
  EXPECT_EQ(static_cast<uint64_t>(ESTALE), N(r, "errno"));
  EXPECT_EQ("ESTALE", S(r, "error"));
  EXPECT_EQ(static_cast<uint64_t>(holder), N(r, "pid"));
  EXPECT_EQ(0u, N(r, "uid"));
  EXPECT_EQ(0u, N(r, "gid"));
  EXPECT_FALSE(S(r, "comm").empty());
  EXPECT_NE(std::string::npos, S(r, "message").find("stale token 1 < epoch 2")) << S(r, "message");
}

// Path operations refused with ESTALE are retried once by the kernel (VFS retry_estale): the
// trail still holds one record per system call.
TEST(AuditRecord, StalePathOperationsOnceEach) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "f", "x"));
  ASSERT_EQ(0, as_job(m, 2, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  pid_t pid;
  EXPECT_EQ(0, as_job(
                   m, 2,
                   [&] {
                     // Superseded by epoch 3 while bound.
                     if (in_child([&] { return m.ctl("advance / 3"); }) != 0) return 9;
                     if (E(open(m.path("f").c_str(), O_WRONLY)) != ESTALE) return 1;
                     if (E(mkdir(m.path("e").c_str(), 0755)) != ESTALE) return 2;
                     if (E(chmod(m.path("f").c_str(), 0600)) != ESTALE) return 3;
                     if (E(rename(m.path("f").c_str(), m.path("g").c_str())) != ESTALE) return 4;
                     if (E(rmdir(m.path("d").c_str())) != ESTALE) return 5;
                     return 0;
                   },
                   &pid));
  auto refused = refusals(m);
  ASSERT_EQ(5u, refused.size()) << dump(refused);
  const char* ops[] = {"open", "mkdir", "setattr", "rename", "rmdir"};
  const char* paths[] = {"/f", "/e", "/f", "/f", "/d"};
  for (size_t i = 0; i < 5; i++) {
    expect_complete(refused[i]);
    EXPECT_EQ(ops[i], S(refused[i], "op"));
    EXPECT_EQ(paths[i], S(refused[i], "path"));
    EXPECT_EQ("stale", S(refused[i], "reason"));
    EXPECT_EQ("2", S(refused[i], "token"));
    EXPECT_EQ(3u, N(refused[i], "epoch_before"));
    EXPECT_EQ(static_cast<uint64_t>(pid), N(refused[i], "pid"));
  }
  EXPECT_EQ("/g", S(refused[3], "path2"));
}

TEST(AuditRecord, MissingToken) {
  Mount m;
  pid_t pid;
  EXPECT_EQ(EPERM, as_job(
                       m, 0, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }, &pid));
  auto refused = refusals(m);
  ASSERT_EQ(1u, refused.size()) << dump(refused);
  const Value& r = refused[0];
  expect_complete(r);
  EXPECT_EQ("mkdir", S(r, "op"));
  EXPECT_EQ("missing", S(r, "reason"));
  EXPECT_EQ("/", S(r, "domain"));
  EXPECT_EQ("/d", S(r, "path"));
  EXPECT_EQ("", S(r, "token"));
  EXPECT_EQ(static_cast<uint64_t>(EPERM), N(r, "errno"));
  EXPECT_EQ("EPERM", S(r, "error"));
  EXPECT_EQ(static_cast<uint64_t>(pid), N(r, "pid"));
}

TEST(AuditRecord, MalformedCtlLines) {
  Mount m;
  pid_t pid1, pid2;
  EXPECT_EQ(EINVAL, child([&] { return m.ctl("bind / 01\n"); }, &pid1));
  EXPECT_EQ(EINVAL, child([&] { return m.ctl("bind /nodomain 1\n"); }, &pid2));
  auto refused = refusals(m);
  ASSERT_EQ(2u, refused.size()) << dump(refused);
  for (const auto& r : refused) {
    expect_complete(r);
    EXPECT_EQ("malformed", S(r, "reason"));
    EXPECT_EQ(static_cast<uint64_t>(EINVAL), N(r, "errno"));
    EXPECT_EQ("EINVAL", S(r, "error"));
    EXPECT_FALSE(S(r, "message").empty());
  }
  EXPECT_EQ(static_cast<uint64_t>(pid1), N(refused[0], "pid"));
  EXPECT_EQ(static_cast<uint64_t>(pid2), N(refused[1], "pid"));
  EXPECT_EQ("bind", S(refused[1], "op"));
  EXPECT_EQ("/nodomain", S(refused[1], "domain"));
  EXPECT_EQ("1", S(refused[1], "token"));
}

TEST(AuditRecord, UnauthorisedBind) {
  Mount m;
  pid_t pid;
  EXPECT_EQ(EACCES,
            child(
                [&] {
                  if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
                    return 100;
                  return m.ctl("bind / 1");
                },
                &pid));
  auto refused = refusals(m);
  ASSERT_EQ(1u, refused.size()) << dump(refused);
  const Value& r = refused[0];
  expect_complete(r);
  EXPECT_EQ("bind", S(r, "op"));
  EXPECT_EQ("unauthorised", S(r, "reason"));
  EXPECT_EQ("/", S(r, "domain"));
  EXPECT_EQ("1", S(r, "token"));
  EXPECT_EQ(static_cast<uint64_t>(EACCES), N(r, "errno"));
  EXPECT_EQ(65534u, N(r, "uid"));
  EXPECT_EQ(65534u, N(r, "gid"));
  EXPECT_EQ(static_cast<uint64_t>(pid), N(r, "pid"));
  EXPECT_NE(std::string::npos, S(r, "message").find("65534")) << S(r, "message");
}

// Any user may write `unbind`: only a binding removed is recorded, so that writing it over and
// over (a thousand times here) cannot flood the trail and rotate other records away.
TEST(AuditRecord, UnbindOfNothingIsNotRecorded) {
  Mount m;
  pid_t pid;
  EXPECT_EQ(0, child(
                   [&] {
                     if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
                       return 100;
                     for (int i = 0; i < 1000; i++)
                       if (int err = m.ctl("unbind /")) return err;
                     return 0;
                   },
                   &pid));
  EXPECT_EQ(0, child(
                   [&] {
                     if (m.ctl("bind / 1") || m.ctl("unbind /")) return 1;
                     return m.ctl("unbind /");
                   },
                   &pid));
  auto unbound =
      where(records(state_dir(m)), [](const Value& r) { return S(r, "op") == "unbind"; });
  ASSERT_EQ(1u, unbound.size()) << dump(unbound);
  EXPECT_EQ("unbound", S(unbound[0], "decision"));
  EXPECT_EQ(static_cast<uint64_t>(pid), N(unbound[0], "pid"));
}

TEST(AuditRecord, TokenTooFar) {
  Mount m({"-o", "max_jump=10"});
  pid_t pid;
  EXPECT_EQ(ERANGE, child([&] { return m.ctl("bind / 50"); }, &pid));
  int st;
  sh_out(ctl_cmd("advance --mount '" + m.mnt() + "' / 100 2>/dev/null"), &st);
  EXPECT_NE(0, st);
  auto refused = refusals(m);
  ASSERT_EQ(2u, refused.size()) << dump(refused);
  for (const auto& r : refused) {
    expect_complete(r);
    EXPECT_EQ("too_far", S(r, "reason"));
    EXPECT_EQ(static_cast<uint64_t>(ERANGE), N(r, "errno"));
    EXPECT_EQ(0u, N(r, "epoch_before"));
  }
  EXPECT_EQ("bind", S(refused[0], "op"));
  EXPECT_EQ("50", S(refused[0], "token"));
  EXPECT_EQ(static_cast<uint64_t>(pid), N(refused[0], "pid"));
  EXPECT_EQ("advance", S(refused[1], "op"));
  EXPECT_EQ("100", S(refused[1], "token"));
}

TEST(AuditRecord, Rollback) {
  Mount m;
  roll_back(m);
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  pid_t pid;
  EXPECT_EQ(EIO, as_job(
                     m, 3, [&] { return E(open(m.path("f").c_str(), O_WRONLY)); }, &pid));
  EXPECT_EQ("five!", slurp(m.bpath("f")));
  // A rollback noticed at mount may be reported by a "mount" record; the refusal is one record.
  auto refused = where(refusals(m), [](const Value& r) { return S(r, "op") != "mount"; });
  ASSERT_EQ(1u, refused.size()) << dump(refused);
  const Value& r = refused[0];
  expect_complete(r);
  EXPECT_EQ("open", S(r, "op"));
  EXPECT_EQ("rollback", S(r, "reason"));
  EXPECT_EQ("/f", S(r, "path"));
  EXPECT_EQ("3", S(r, "token"));
  EXPECT_EQ(1u, N(r, "epoch_before"));
  EXPECT_EQ(static_cast<uint64_t>(EIO), N(r, "errno"));
  EXPECT_EQ(static_cast<uint64_t>(pid), N(r, "pid"));
  EXPECT_NE(std::string::npos, S(r, "message").find("rollback")) << S(r, "message");
}

TEST(AuditRecord, AdvanceByFencectl) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 3, "f", "x"));
  ASSERT_EQ(0, sh(ctl_cmd("advance --mount '" + m.mnt() + "' / 7 >/dev/null")));
  auto adv = where(records(state_dir(m)), [](const Value& r) {
    return S(r, "decision") == "advanced" && S(r, "op") == "advance";
  });
  ASSERT_EQ(1u, adv.size());
  const Value& r = adv[0];
  expect_complete(r);
  EXPECT_EQ("/", S(r, "domain"));
  EXPECT_EQ("7", S(r, "token"));
  EXPECT_EQ(3u, N(r, "epoch_before"));
  EXPECT_EQ(7u, N(r, "epoch_after"));
  EXPECT_EQ(0u, N(r, "errno"));
  EXPECT_EQ("fencectl", S(r, "comm"));
  // The advance made by the first write is recorded too, and equal-epoch work is not logged.
  auto by_write = where(records(state_dir(m)), [](const Value& r) {
    return S(r, "decision") == "advanced" && S(r, "op") != "advance";
  });
  ASSERT_EQ(1u, by_write.size());
  EXPECT_EQ(0u, N(by_write[0], "epoch_before"));
  EXPECT_EQ(3u, N(by_write[0], "epoch_after"));
  EXPECT_EQ("/f", S(by_write[0], "path"));
}

// --- When the log cannot be written
// ---------------------------------------------------------------

// The state on a small tmpfs that is then filled: the audit log cannot be appended to.
TEST(AuditFailure, DecisionsStandAndTheGapIsRecorded) {
  std::string dir = temp_dir("auditfull");
  ASSERT_EQ(0, sh("mount -t tmpfs -o size=256k,mode=0700 tmpfs '" + dir + "'"));
  struct Cleanup {
    std::string dir;
    ~Cleanup() { sh("umount -l '" + dir + "' 2>/dev/null; rmdir '" + dir + "'"); }
  } cleanup{dir};
  std::string state = dir + "/state";
  {
    Mount m({"-o", "state=" + state});
    ASSERT_TRUE(m.mounted());
    ASSERT_EQ(0, write_file(m, 2, "f", "x"));  // epoch 2 is durable before the disk fills
    ASSERT_NE(0, sh("dd if=/dev/zero of='" + dir + "/filler' bs=4k 2>/dev/null"));
    std::string before = tree_hash(m.backing());
    // Refusals are still refused (enough of them to fill the last page of the log), and
    // equal-epoch work is still admitted.
    EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 1"); }));
    EXPECT_EQ(0, as_job(m, 0, [&] {
                for (int i = 0; i < 40; i++)
                  if (E(mkdir(m.path("none" + std::to_string(i)).c_str(), 0755)) != EPERM) return 1;
                return 0;
              }));
    EXPECT_EQ(before, tree_hash(m.backing()));
    EXPECT_EQ(0, write_file(m, 2, "g", "still admitted"));
    EXPECT_EQ("still admitted", slurp(m.bpath("g")));
    std::map<std::string, PromFamily> fam;
    std::string text = slurp(m.path(".fencefs/metrics"));
    ASSERT_EQ("", validate_prometheus(text, &fam)) << text;
    EXPECT_GE(sample_value(fam, "fencefs_audit_write_failures_total", {}), 1) << text;
    EXPECT_NE(std::string::npos, m.daemon_log().find("audit: cannot write")) << m.daemon_log();
    // Space again: the next record is preceded by one that names the gap.
    ASSERT_EQ(0, unlink((dir + "/filler").c_str()));
    EXPECT_EQ(EPERM, as_job(m, 0, [&] { return E(mkdir(m.path("again").c_str(), 0755)); }));
    auto recs = records(state);
    auto lost = where(recs, [](const Value& r) { return S(r, "reason") == "lost"; });
    ASSERT_EQ(1u, lost.size()) << dump(recs);
    expect_complete(lost[0]);
    EXPECT_EQ("audit", S(lost[0], "op"));
    EXPECT_EQ("info", S(lost[0], "decision"));
    EXPECT_NE(std::string::npos, S(lost[0], "message").find("could not be written"));
    ASSERT_GE(recs.size(), 2u);
    EXPECT_EQ("/again", S(recs.back(), "path"));
    EXPECT_EQ("lost", S(recs[recs.size() - 2], "reason"));
    EXPECT_TRUE(where(recs, [](const Value& r) { return S(r, "path") == "/none39"; }).empty());
  }
}

// A FIFO put where the epochs trail goes (by root: the state is 0700) neither blocks the advance
// that writes the next record nor receives it: the advance succeeds and the failure is reported.
TEST(AuditFailure, AFifoInPlaceOfTheEpochsTrailDoesNotBlockAdvances) {
  Mount m;
  ASSERT_TRUE(m.mounted());
  std::string trail = state_dir(m) + "/epochs.jsonl";
  unlink(trail.c_str());
  ASSERT_EQ(0, mkfifo(trail.c_str(), 0600));
  fflush(nullptr);
  pid_t p = fork();
  if (p == 0) _exit(write_file(m, 7, "f", "seven"));
  int st = 0;
  bool done = false;
  for (int i = 0; i < 200 && !done; i++) {
    done = waitpid(p, &st, WNOHANG) == p;
    if (!done) usleep(50'000);
  }
  if (!done) {  // blocked on the FIFO: a reader lets it go, then the test fails
    int r = open(trail.c_str(), O_RDONLY | O_NONBLOCK);
    waitpid(p, &st, 0);
    if (r >= 0) close(r);
  }
  ASSERT_TRUE(done) << "the advance blocked on the FIFO";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ("seven", slurp(m.bpath("f")));
  EXPECT_NE(std::string::npos, m.daemon_log().find("epochs trail")) << m.daemon_log();
  struct stat fst;
  ASSERT_EQ(0, lstat(trail.c_str(), &fst));
  EXPECT_TRUE(S_ISFIFO(fst.st_mode));
}

// --- Rotation ------------------------------------------------------------------------------------

TEST(AuditRotation, KeepsTheConfiguredNumberOfFiles) {
  Mount m({"-o", "audit_max_bytes=2000,audit_keep=2"});
  EXPECT_EQ(0, as_job(m, 0, [&] {
              for (int i = 0; i < 150; i++)
                if (E(mkdir(m.path("d" + std::to_string(i)).c_str(), 0755)) != EPERM) return 1;
              return 0;
            }));
  struct stat st;
  std::string s = state_dir(m);
  ASSERT_EQ(0, stat((s + "/audit.log").c_str(), &st));
  EXPECT_LE(st.st_size, 2000);
  for (const char* f : {"/audit.log.1", "/audit.log.2"}) {
    ASSERT_EQ(0, stat((s + f).c_str(), &st)) << f;
    EXPECT_LE(st.st_size, 2000) << f;
    EXPECT_GT(st.st_size, 1000) << f;
  }
  EXPECT_NE(0, stat((s + "/audit.log.3").c_str(), &st));
  EXPECT_EQ(3u, fencefs::audit::log_files(s).size());
  // Whole records only, oldest first, the newest refusal in the current file.
  auto recs = records(s);
  ASSERT_GT(recs.size(), 5u);
  for (size_t i = 1; i < recs.size(); i++) EXPECT_LE(S(recs[i - 1], "time"), S(recs[i], "time"));
  EXPECT_EQ("/d149", S(recs.back(), "path"));
  EXPECT_LT(recs.size(), 150u);
  std::string cur = slurp(s + "/audit.log");
  EXPECT_NE(std::string::npos, cur.find("\"path\":\"/d149\""));
}

// --- fencectl audit ------------------------------------------------------------------------------

TEST(FencectlAudit, JsonLinesAndFilters) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 1, [&] { return E(mkdir(m.path("jobs").c_str(), 0755)); }));
  ASSERT_EQ(0, sh(ctl_cmd("domain add '" + m.path("jobs") + "' >/dev/null")));
  // The owner of token 3 is superseded by fencectl's advance to 4 while bound.
  EXPECT_EQ(ESTALE,
            as_superseded_job(
                m, 3, [&] { return E(mkdir(m.path("x").c_str(), 0755)); },
                [&] { return sh(ctl_cmd("advance --mount '" + m.mnt() + "' / 4 >/dev/null")); }));
  EXPECT_EQ(EPERM, as_job(m, 0, [&] { return E(mkdir(m.path("jobs/y").c_str(), 0755)); }));
  std::string mnt = "'" + m.mnt() + "'";
  std::string state = "'" + state_dir(m) + "'";

  // Everything: exactly the stored lines, each a JSON object; --state gives the same.
  std::string stored;
  for (auto& f : fencefs::audit::log_files(state_dir(m))) stored += slurp(f);
  int st;
  std::string all = sh_out(ctl_cmd("audit --mount " + mnt + " --json"), &st);
  EXPECT_EQ(0, st);
  EXPECT_EQ(stored, all);
  EXPECT_EQ(all, sh_out(ctl_cmd("audit --state " + state + " --json")));
  std::vector<std::string> lines = lines_of(all);
  ASSERT_GE(lines.size(), 6u);
  std::vector<Value> recs;
  for (auto& l : lines) {
    std::string err;
    auto v = fencefs::json::parse(l, &err);
    ASSERT_TRUE(v && v->type == Value::Type::Object) << err << ": " << l;
    recs.push_back(*v);
  }

  auto filtered = [&](const std::string& args) {
    std::vector<Value> out;
    int s;
    for (auto& l : lines_of(sh_out(ctl_cmd("audit --mount " + mnt + " --json " + args), &s))) {
      auto v = fencefs::json::parse(l);
      EXPECT_TRUE(v.has_value()) << l;
      if (v) out.push_back(*v);
    }
    EXPECT_EQ(0, s) << args;
    return out;
  };
  auto refused = filtered("--decision refused");
  ASSERT_EQ(2u, refused.size());
  for (auto& r : refused) EXPECT_EQ("refused", S(r, "decision"));
  EXPECT_EQ("stale", S(refused[0], "reason"));
  EXPECT_EQ("missing", S(refused[1], "reason"));
  auto adv = filtered("--decision advanced");
  ASSERT_EQ(2u, adv.size());  // the first mkdir (0 -> 1) and fencectl advance (1 -> 4)
  EXPECT_EQ(3u, filtered("--decision refused,declared").size());
  auto jobs = filtered("--domain /jobs");
  ASSERT_GE(jobs.size(), 2u);  // declared, refused
  for (auto& r : jobs) EXPECT_EQ("/jobs", S(r, "domain"));
  auto jobs_refused = filtered("--domain /jobs/ --decision refused");
  ASSERT_EQ(1u, jobs_refused.size());
  EXPECT_EQ("/jobs/y", S(jobs_refused[0], "path"));

  // --since: relative, ISO in the future, ISO at a record's own time.
  EXPECT_EQ(recs.size(), filtered("--since 1h").size());
  int64_t later = fencefs::audit::now_unix_ns() + int64_t{3600} * 1000000000;
  std::string future = fencefs::audit::format_time(later).substr(0, 19) + "Z";
  EXPECT_EQ(0u, filtered("--since " + future).size());
  std::string t3 = S(recs[3], "time");
  size_t expect = 0;
  for (auto& r : recs) expect += S(r, "time") >= t3;
  EXPECT_EQ(expect, filtered("--since " + t3).size());
  // +00:00 offset form and the same instant without fraction.
  EXPECT_EQ(recs.size(), filtered("--since " + S(recs[0], "time").substr(0, 19) + "+00:00").size());
  sh_out(ctl_cmd("audit --mount " + mnt + " --since yesterday 2>/dev/null"), &st);
  EXPECT_EQ(200, st);  // usage error

  // The table: header and one row per record.
  std::string table = sh_out(ctl_cmd("audit --mount " + mnt + " --decision refused"), &st);
  EXPECT_EQ(0, st);
  auto rows = lines_of(table);
  ASSERT_EQ(3u, rows.size()) << table;
  EXPECT_TRUE(std::regex_search(rows[0], std::regex("^TIME +DECISION +REASON +OP +DOMAIN +PATH +"
                                                    "TOKEN +EPOCH +PID +COMM$")))
      << rows[0];
  EXPECT_TRUE(std::regex_search(rows[1], std::regex(" refused +stale +mkdir +/ +/x +3 +4 ")))
      << rows[1];
}

TEST(FencectlStatus, JsonParses) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 1, "f", "x"));
  EXPECT_EQ(ESTALE, as_superseded_job(m, 1, [&] { return E(unlink(m.path("f").c_str())); }));
  // A bound process shows up with its pid, command and token.
  int ready[2], go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  pid_t bound = fork();
  if (bound == 0) {
    if (m.ctl("bind / 2") != 0) _exit(1);
    char c = 'r';
    if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(2);
    _exit(0);
  }
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1));
  int st;
  auto v = ctl_json("status --json --mount '" + m.mnt() + "'", &st);
  ASSERT_EQ(1, write(go[1], "g", 1));
  waitpid(bound, nullptr, 0);
  EXPECT_EQ(0, st);
  ASSERT_TRUE(v);
  EXPECT_EQ(state_dir(m), S(*v, "state"));
  const Value* ds = v->get("domains");
  ASSERT_TRUE(ds);
  ASSERT_EQ(1u, ds->arr.size());
  const Value& d = ds->arr[0];
  EXPECT_EQ("/", S(d, "path"));
  EXPECT_EQ(2u, N(d, "epoch"));
  EXPECT_GT(N(d, "last_advance_unix_ns"), 0u);
  EXPECT_GE(N(d, "accepted"), 1u);
  ASSERT_TRUE(d.get("refused"));
  EXPECT_GE(N(*d.get("refused"), "stale"), 1u);
  for (const char* k : {"missing", "malformed", "unauthorised", "too_far", "rollback", "io"})
    EXPECT_EQ(0u, N(*d.get("refused"), k)) << k;
  ASSERT_TRUE(d.get("bound"));
  bool found = false;
  for (auto& b : d.get("bound")->arr)
    if (N(b, "pid") == static_cast<uint64_t>(bound)) {
      found = true;
      EXPECT_EQ(2u, N(b, "token"));
      EXPECT_FALSE(S(b, "comm").empty());
    }
  EXPECT_TRUE(found) << "bound pid " << bound << " not listed";
}

// --- fencectl verify -----------------------------------------------------------------------------

TEST(FencectlVerify, CleanTreeIsClean) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "a", "alpha"));
  ASSERT_EQ(0, as_job(m, 2, [&] { return E(mkdir(m.path("sub").c_str(), 0755)); }));
  ASSERT_EQ(0, write_file(m, 2, "sub/b", "bravo!"));
  spit(m.bpath("unstamped"), "put there before fencefs knew");
  ASSERT_TRUE(wait_stamp(m.bpath("a"), 5));
  ASSERT_TRUE(wait_stamp(m.bpath("sub/b"), 6));
  std::string b = "'" + m.backing() + "'";
  int st;
  // Mounted.
  auto v = ctl_json("verify " + b + " --json", &st);
  EXPECT_EQ(0, st);
  ASSERT_TRUE(v);
  EXPECT_EQ("true", S(*v, "clean"));
  EXPECT_EQ("true", S(*v, "mounted"));
  EXPECT_TRUE(finding_kinds(*v).empty());
  EXPECT_EQ(3u, N(*v->get("files"), "regular"));
  EXPECT_EQ(2u, N(*v->get("files"), "stamped"));
  EXPECT_EQ(1u, N(*v->get("files"), "unstamped"));
  ASSERT_TRUE(v->get("domains") && !v->get("domains")->arr.empty());
  const Value& d0 = v->get("domains")->arr[0];
  EXPECT_EQ(std::to_string(N(d0, "epoch")), S(d0, "epoch_str"));
  // Not mounted; not a terminal, so nothing on stderr.
  ASSERT_EQ(0, m.unmount());
  std::string errfile = m.root() + "/verify.err";
  std::string out = sh_out(ctl_cmd("verify " + b + " 2>'" + errfile + "'"), &st);
  EXPECT_EQ(0, st) << out;
  EXPECT_EQ("", slurp(errfile));
  EXPECT_NE(std::string::npos, out.find("clean")) << out;
  v = ctl_json("verify " + b + " --json", &st);
  EXPECT_EQ(0, st);
  ASSERT_TRUE(v);
  EXPECT_EQ("false", S(*v, "mounted"));
  EXPECT_EQ("clean", S(*v, "status"));
  EXPECT_EQ("", sh_out(ctl_cmd("verify --quiet " + b)));
}

// A stamp that is not one is reported with its bytes as they are (each byte of invalid UTF-8 as
// \udcXX, so tools get the original back).
TEST(FencectlVerify, ReportsAMalformedStampWithItsBytes) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "f", "fenced"));
  ASSERT_TRUE(wait_stamp(m.bpath("f"), 6));
  ASSERT_EQ(0, m.unmount());
  const std::string bad = "7 x\x01\xff";
  ASSERT_EQ(0, setxattr(m.bpath("f").c_str(), "trusted.fencefs", bad.data(), bad.size(), 0));
  int st;
  auto v = ctl_json("verify '" + m.backing() + "' --json", &st);
  EXPECT_EQ(1, st);
  ASSERT_TRUE(v);
  EXPECT_EQ(std::vector<std::string>{"malformed stamp /f"}, finding_kinds(*v));
  std::string raw = sh_out(ctl_cmd("verify '" + m.backing() + "' --json"));
  EXPECT_NE(std::string::npos, raw.find(R"("stamp":"7 x\u0001\udcff")")) << raw;
}

// BACKING/.fencefs as a link (whoever may write BACKING's root can put one there): verify, run as
// root, reads no state through it.
TEST(FencectlVerify, ALinkAtBackingFencefsIsNotFollowed) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "f", "fenced"));
  ASSERT_EQ(0, m.unmount());
  std::string elsewhere = m.root() + "/elsewhere";
  ASSERT_EQ(0, ::rename(m.bpath(".fencefs").c_str(), elsewhere.c_str()));
  ASSERT_EQ(0, ::symlink(elsewhere.c_str(), m.bpath(".fencefs").c_str()));
  int st;
  auto v = ctl_json("verify '" + m.backing() + "' --json", &st);
  EXPECT_EQ(2, st);
  ASSERT_TRUE(v);
  std::string out = sh_out(ctl_cmd("verify '" + m.backing() + "' 2>&1"));
  EXPECT_NE(std::string::npos, out.find("is a symbolic link, not followed")) << out;
  // Named as the state, it is read.
  v = ctl_json("verify '" + m.backing() + "' --state '" + elsewhere + "' --json", &st);
  EXPECT_EQ(0, st);
  ASSERT_TRUE(v);
  EXPECT_EQ("clean", S(*v, "status"));
}

// A holder superseded before it closes never restamps its file; the advance stamps what it wrote
// under the old epoch, so its admitted writes are not reported as a change outside fencefs. A
// direct edit afterwards still is.
TEST(FencectlVerify, ASupersededWritersAdmittedWritesAreNotAFinding) {
  Mount m;
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 2")) return 1;
              int fd = ::open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
              if (fd < 0 || write(fd, "admitted", 8) != 8) return 2;
              if (in_child([&] { return m.ctl("advance / 3"); }) != 0) return 3;
              if (write(fd, "late", 4) != -1 || errno != ESTALE) return 4;
              ::close(fd);
              return 0;
            }));
  EXPECT_EQ("admitted", slurp(m.bpath("f")));
  std::string b = "'" + m.backing() + "'";
  int st;
  auto v = ctl_json("verify " + b + " --json", &st);
  ASSERT_TRUE(v);
  EXPECT_EQ(0, st) << sh_out(ctl_cmd("verify " + b));
  EXPECT_EQ(std::vector<std::string>{}, finding_kinds(*v));
  ASSERT_EQ(0, m.unmount());
  v = ctl_json("verify " + b + " --json", &st);
  ASSERT_TRUE(v);
  EXPECT_EQ(0, st) << sh_out(ctl_cmd("verify " + b));
  {
    std::ofstream out(m.bpath("f"), std::ios::app);
    out << " and edited";
  }
  v = ctl_json("verify " + b + " --json", &st);
  ASSERT_TRUE(v);
  EXPECT_EQ(1, st);
  EXPECT_EQ(std::vector<std::string>{"changed outside fencefs /f"}, finding_kinds(*v));
}

// A file CREATE made carries nothing to check until its holder has written: its stamp is written
// once, at release, not at create and again at release (each write is an IN_ATTRIB in BACKING;
// IN_MODIFY watched too, so that two around the data's write are not merged into one).
TEST(Stamps, AFileCreatedAndWrittenIsStampedOnce) {
  Mount m;
  int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  ASSERT_GE(in, 0);
  ASSERT_GE(inotify_add_watch(in, m.backing().c_str(), IN_ATTRIB | IN_MODIFY), 0);
  ASSERT_EQ(0, write_file(m, 2, "f", std::string(4096, 'x')));
  ASSERT_TRUE(wait_stamp(m.bpath("f"), 4096));
  ASSERT_EQ(0, m.unmount());  // every request answered
  int attribs = 0;
  alignas(inotify_event) char buf[4096];
  for (ssize_t n; (n = read(in, buf, sizeof buf)) > 0;) {
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      if ((ev->mask & IN_ATTRIB) && ev->len > 0 && std::string(ev->name) == "f") attribs++;
      p += sizeof(inotify_event) + ev->len;
    }
  }
  close(in);
  EXPECT_EQ(1, attribs);
  EXPECT_EQ(0u, stamp_of(m.bpath("f")).rfind("2 4096 ", 0)) << stamp_of(m.bpath("f"));
}

// The stamp a fresh file owes is written by the advance that supersedes its holder, who will not
// write it at close: the file carries the epoch it was created under, and verify finds nothing.
TEST(Stamps, AFileCreatedBeforeAnAdvanceCarriesTheOldEpoch) {
  Mount m;
  EXPECT_EQ(0, in_child([&] {
              if (m.ctl("bind / 2")) return 1;
              int fd = ::open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              if (fd < 0) return 2;
              if (in_child([&] { return m.ctl("advance / 3"); }) != 0) return 3;
              if (stamp_of(m.bpath("f")).rfind("2 0 ", 0) != 0) return 4;
              if (write(fd, "late", 4) != -1 || errno != ESTALE) return 5;
              return ::close(fd) == 0 ? 0 : 6;
            }));
  ASSERT_EQ(0, m.unmount());
  EXPECT_EQ(0u, stamp_of(m.bpath("f")).rfind("2 0 ", 0)) << stamp_of(m.bpath("f"));
  EXPECT_EQ(std::make_pair(0, std::vector<std::string>{}), verify_backing(m));
}

// A file created through the mount and closed unwritten is stamped as it was created: a write
// into BACKING while it was open is found, not taken into the stamp its release writes.
TEST(Stamps, AWriteAroundTheMountIntoAFileCreatedThereIsFound) {
  Mount m;
  EXPECT_EQ(0, as_job(m, 2, [&] {
              int fd = ::open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              if (fd < 0) return 1;
              std::ofstream(m.bpath("f")) << "around the fence";
              return ::close(fd) == 0 ? 0 : 2;
            }));
  ASSERT_EQ(0, m.unmount());  // the release has been served
  EXPECT_EQ(0u, stamp_of(m.bpath("f")).rfind("2 0 ", 0)) << stamp_of(m.bpath("f"));
  EXPECT_EQ(std::make_pair(1, std::vector<std::string>{"changed outside fencefs /f"}),
            verify_backing(m));
}

// ... but what was written through another handle meanwhile, and stamped at its close, is not
// taken back by the unwritten creator's later release.
TEST(Stamps, AnUnwrittenCreatorsReleaseKeepsALaterStamp) {
  Mount m;
  EXPECT_EQ(0, as_job(m, 2, [&] {
              int fd = ::open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              if (fd < 0) return 1;
              int other = ::open(m.path("f").c_str(), O_WRONLY);
              if (other < 0 || write(other, "abc", 3) != 3 || ::close(other) != 0) return 2;
              if (!wait_stamp(m.bpath("f"), 3)) return 3;
              return ::close(fd) == 0 ? 0 : 4;
            }));
  ASSERT_EQ(0, m.unmount());
  EXPECT_EQ(0u, stamp_of(m.bpath("f")).rfind("2 3 ", 0)) << stamp_of(m.bpath("f"));
  EXPECT_EQ(std::make_pair(0, std::vector<std::string>{}), verify_backing(m));
}

// The create happened whatever came after it: the stamp it owes is written at release though
// the file's domain changed (`domain add` above it) or the handle was rebound to a higher token,
// where a handle that wrote would not restamp. Else a later write around the mount goes unseen.
TEST(Stamps, ACreateIsStampedThoughTheFileMovedDomainOrTheHandleWasRebound) {
  Mount m;
  ASSERT_EQ(0, ::mkdir(m.bpath("sub").c_str(), 0755));
  EXPECT_EQ(0, as_job(m, 2, [&] {
              int moved = ::open(m.path("sub/f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              int rebound = ::open(m.path("g").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              if (moved < 0 || rebound < 0) return 1;
              if (sh(ctl_cmd("domain add '" + m.path("sub") + "' >/dev/null")) != 0) return 2;
              struct fencefs_token t {};
              t.epoch = 3;
              if (ioctl(rebound, FENCEFS_IOC_SET_TOKEN, &t) != 0) return 3;
              return ::close(moved) == 0 && ::close(rebound) == 0 ? 0 : 4;
            }));
  ASSERT_EQ(0, m.unmount());
  EXPECT_EQ(0u, stamp_of(m.bpath("sub/f")).rfind("2 0 ", 0)) << stamp_of(m.bpath("sub/f"));
  EXPECT_EQ(0u, stamp_of(m.bpath("g")).rfind("2 0 ", 0)) << stamp_of(m.bpath("g"));
  std::ofstream(m.bpath("sub/f")) << "around";
  std::ofstream(m.bpath("g")) << "around";
  EXPECT_EQ(std::make_pair(1, std::vector<std::string>{"changed outside fencefs /g",
                                                       "changed outside fencefs /sub/f"}),
            verify_backing(m));
}

// A handle rebound to a token above the epoch after it wrote still stamps what it wrote, under
// the epoch it wrote at: at its close (g), or at the advance that passes that epoch (f).
TEST(Stamps, AHandleReboundAfterItWroteStampsWhatItWrote) {
  Mount m;
  EXPECT_EQ(0, as_job(m, 2, [&] {
              int f = ::open(m.path("f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              int g = ::open(m.path("g").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              if (f < 0 || g < 0 || write(f, "data", 4) != 4 || write(g, "data", 4) != 4) return 1;
              struct fencefs_token t {};
              t.epoch = 5;
              if (ioctl(f, FENCEFS_IOC_SET_TOKEN, &t) != 0) return 2;
              if (ioctl(g, FENCEFS_IOC_SET_TOKEN, &t) != 0) return 3;
              if (::close(g) != 0 || !wait_stamp(m.bpath("g"), 4)) return 4;
              if (in_child([&] { return m.ctl("advance / 3"); }) != 0) return 5;
              return ::close(f) == 0 ? 0 : 6;
            }));
  ASSERT_EQ(0, m.unmount());
  EXPECT_EQ(0u, stamp_of(m.bpath("f")).rfind("2 4 ", 0)) << stamp_of(m.bpath("f"));
  EXPECT_EQ(0u, stamp_of(m.bpath("g")).rfind("2 4 ", 0)) << stamp_of(m.bpath("g"));
  EXPECT_EQ(std::make_pair(0, std::vector<std::string>{}), verify_backing(m));
}

// `domain add` above files open for writing: their handles are refused from then on and do not
// restamp at close, so the declaration stamps what they wrote, as an advance does.
TEST(Stamps, DomainAddStampsWhatHandlesInsideWrote) {
  Mount m;
  ASSERT_EQ(0, ::mkdir(m.bpath("sub").c_str(), 0755));
  ASSERT_EQ(0, write_file(m, 2, "sub/old", "before"));
  EXPECT_EQ(0, as_job(m, 2, [&] {
              int f = ::open(m.path("sub/new").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
              int g = ::open(m.path("sub/old").c_str(), O_WRONLY | O_APPEND);
              if (f < 0 || g < 0 || write(f, "data", 4) != 4 || write(g, "+more", 5) != 5) return 1;
              if (sh(ctl_cmd("domain add '" + m.path("sub") + "' >/dev/null")) != 0) return 2;
              return ::close(f) == 0 && ::close(g) == 0 ? 0 : 3;
            }));
  ASSERT_EQ(0, m.unmount());
  EXPECT_EQ(0u, stamp_of(m.bpath("sub/new")).rfind("2 4 ", 0)) << stamp_of(m.bpath("sub/new"));
  EXPECT_EQ(0u, stamp_of(m.bpath("sub/old")).rfind("2 11 ", 0)) << stamp_of(m.bpath("sub/old"));
  EXPECT_EQ(std::make_pair(0, std::vector<std::string>{}), verify_backing(m));
}

TEST(FencectlVerify, FindsAWriteOutsideFencefs) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "f", "fenced"));
  ASSERT_EQ(0, write_file(m, 2, "g", "fenced"));
  ASSERT_TRUE(wait_stamp(m.bpath("f"), 6));
  ASSERT_TRUE(wait_stamp(m.bpath("g"), 6));
  {
    std::ofstream out(m.bpath("f"), std::ios::app);
    out << " and then not";
  }
  std::string b = "'" + m.backing() + "'";
  int st;
  auto v = ctl_json("verify " + b + " --json", &st);
  EXPECT_EQ(1, st);
  ASSERT_TRUE(v);
  EXPECT_EQ(std::vector<std::string>{"changed outside fencefs /f"}, finding_kinds(*v));
  const Value& f = v->get("findings")->arr[0];
  EXPECT_EQ(6u, N(f, "stamp_size"));
  EXPECT_EQ(19u, N(f, "size"));
  ASSERT_EQ(0, m.unmount());
  v = ctl_json("verify " + b + " --json", &st);
  EXPECT_EQ(1, st);
  ASSERT_TRUE(v);
  EXPECT_EQ(std::vector<std::string>{"changed outside fencefs /f"}, finding_kinds(*v));
  std::string text = sh_out(ctl_cmd("verify " + b), &st);
  EXPECT_EQ(1, st);
  EXPECT_NE(std::string::npos, text.find("changed outside fencefs: /f: size 19 (stamp 6)")) << text;
  // --quiet (docs/audit.md): the findings alone, one per line, each naming its kind once.
  text = sh_out(ctl_cmd("verify --quiet " + b + " 2>&1"), &st);
  EXPECT_EQ(1, st);
  EXPECT_EQ(0u, text.rfind("changed outside fencefs: /f: size 19 (stamp 6), mtime ", 0)) << text;
  EXPECT_EQ(1, std::count(text.begin(), text.end(), '\n')) << text;
  EXPECT_EQ(std::string::npos, text.find("outside fencefs", 30)) << text;
  // Same size, only the mtime changed (touch): still found.
  ASSERT_EQ(0, sh("touch -d '2001-01-01' '" + m.bpath("g") + "'"));
  v = ctl_json("verify " + b + " --json", &st);
  ASSERT_TRUE(v);
  EXPECT_TRUE(has(finding_kinds(*v), "changed outside fencefs /g"));
}

TEST(FencectlVerify, FindsARolledBackJournal) {
  Mount m;
  roll_back(m);
  int st;
  auto v = ctl_json("verify '" + m.backing() + "' --json", &st);
  EXPECT_EQ(1, st);
  ASSERT_TRUE(v);
  auto kinds = finding_kinds(*v);
  EXPECT_TRUE(has(kinds, "rolled back /f")) << ::testing::PrintToString(kinds);
  for (auto& f : v->get("findings")->arr)
    if (S(f, "path") == "/f") {
      EXPECT_EQ(5u, N(f, "stamp_epoch"));
      EXPECT_EQ(1u, N(f, "domain_epoch"));
    }
}

TEST(FencectlVerify, FindsACorruptedJournalRecord) {
  Mount m;
  // Twenty advances, each by a write carrying the next token: twenty journal records.
  for (int e = 1; e <= 20; e++)
    ASSERT_EQ(
        0, as_job(m, e, [&] { return E(mkdir(m.path("d" + std::to_string(e)).c_str(), 0755)); }));
  ASSERT_EQ(0, m.unmount());
  std::string j = state_dir(m) + "/journal";
  std::string bytes = slurp(j);
  ASSERT_GT(bytes.size(), 300u) << "expected 20 records in the journal";
  int st;
  auto v = ctl_json("verify '" + m.backing() + "' --json", &st);
  ASSERT_TRUE(v);
  ASSERT_EQ(0, st) << "clean before the flip";
  size_t mid = bytes.size() / 2;
  bytes[mid] = static_cast<char>(bytes[mid] ^ 0x40);
  spit(j, bytes);
  v = ctl_json("verify '" + m.backing() + "' --json", &st);
  EXPECT_EQ(1, st);
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->get("journal"));
  ASSERT_FALSE(v->get("journal")->get("findings")->arr.empty());
  std::string msg = v->get("journal")->get("findings")->arr[0].as_string();
  EXPECT_NE(std::string::npos, msg.find("journal")) << msg;
  EXPECT_NE(std::string::npos, msg.find("byte")) << msg;
  EXPECT_TRUE(has(finding_kinds(*v), "journal ")) << ::testing::PrintToString(finding_kinds(*v));
}

TEST(FencectlVerify, CannotCheckIsExitTwo) {
  int st;
  auto v = ctl_json("verify /nonexistent/backing --json", &st);
  EXPECT_EQ(2, st);
  ASSERT_TRUE(v);
  EXPECT_EQ("error", S(*v, "status"));
  EXPECT_FALSE(v->get("errors")->arr.empty());
  // A directory without any state.
  std::string dir = temp_dir("verify");
  sh_out(ctl_cmd("verify '" + dir + "' 2>/dev/null"), &st);
  EXPECT_EQ(2, st);
  sh("rm -rf '" + dir + "'");
}

// --- fencectl recover ----------------------------------------------------------------------------

TEST(FencectlRecover, RefusesWhileMountedThenRaisesEveryDomain) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 3, "f", "x"));
  std::string args = "recover --state '" + state_dir(m) + "' --floor 9";
  int st;
  std::string out = sh_out(ctl_cmd(args + " 2>&1"), &st);
  EXPECT_EQ(215, st);  // exit_code::kFailed
  EXPECT_NE(std::string::npos, out.find("in use")) << out;
  auto v = ctl_json(args + " --json", &st);
  EXPECT_EQ(215, st);
  ASSERT_TRUE(v);
  EXPECT_EQ("true", S(*v, "in_use"));
  char epoch[32] = {};
  ASSERT_GT(getxattr(m.mnt().c_str(), "user.fencefs.epoch", epoch, sizeof epoch - 1), 0);
  EXPECT_STREQ("3", epoch);
  ASSERT_EQ(0, m.unmount());
  v = ctl_json(args + " --json", &st);
  EXPECT_EQ(0, st);
  ASSERT_TRUE(v);
  EXPECT_EQ("true", S(*v, "ok"));
  ASSERT_EQ(1u, v->get("domains")->arr.size());
  EXPECT_EQ(9u, N(v->get("domains")->arr[0], "epoch"));
  EXPECT_FALSE(v->get("report")->arr.empty());
  auto rec = where(records(state_dir(m)), [](const Value& r) { return S(r, "op") == "recover"; });
  ASSERT_EQ(1u, rec.size());
  expect_complete(rec[0]);
  EXPECT_EQ("recovered", S(rec[0], "decision"));
  EXPECT_EQ(9u, N(rec[0], "epoch_after"));
  EXPECT_EQ("fencectl", S(rec[0], "comm"));
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  EXPECT_EQ(ESTALE, in_child([&] { return m.ctl("bind / 8"); }));
  EXPECT_EQ(0, as_job(m, 9, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  sh_out(ctl_cmd("recover --state /x --floor -1 2>/dev/null"), &st);
  EXPECT_EQ(200, st);  // usage error
}

// A domain declared only in the part of the journal that recovery discards is gone from the
// state; BACKING's high-water copy still names it, and recover says so instead of dropping it
// silently.
TEST(FencectlRecover, NamesDomainsTheDiscardedJournalDeclared) {
  Mount m;
  ASSERT_EQ(0, as_job(m, 1, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  ASSERT_EQ(0, sh(ctl_cmd("domain add '" + m.path("d") + "' >/dev/null")));
  ASSERT_EQ(0, sh(ctl_cmd("advance --mount '" + m.mnt() + "' /d 4 >/dev/null")));
  ASSERT_EQ(0, m.unmount());
  // Damage the first record after the 40-byte header, the root's advance to 1: recovery discards
  // it and everything after it, /d's declaration too. Its CRC (bytes 4-7) is chained from the
  // random incarnation, so a bit is flipped there; a fixed byte would be no change 1 time in 256.
  std::string j = state_dir(m) + "/journal";
  std::string bytes = slurp(j);
  ASSERT_GT(bytes.size(), 49u);
  ASSERT_EQ(1, bytes[48]) << "the first record is not an ADVANCE";
  bytes[44] = static_cast<char>(bytes[44] ^ 0x40);
  spit(j, bytes);
  int st;
  auto v = ctl_json("recover --state '" + state_dir(m) + "' --floor 9 --json", &st);
  EXPECT_EQ(0, st);
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->get("warnings"));
  std::string all;
  for (auto& w : v->get("warnings")->arr) all += w.as_string() + "\n";
  EXPECT_NE(std::string::npos, all.find("domain /d ")) << all;
  EXPECT_NE(std::string::npos, all.find("domain add")) << all;
  // Declared again, /d does not start over: a token its old incarnation had refused is refused.
  ASSERT_TRUE(m.remount()) << m.daemon_log();
  std::string out = sh_out(ctl_cmd("domain add '" + m.path("d") + "' 2>&1"), &st);
  EXPECT_EQ(0, st) << out;
  EXPECT_NE(std::string::npos, out.find("was at epoch 4")) << out;
  auto write_d = [&](uint64_t token) {
    return in_child([&] {
      if (m.ctl("bind /d " + std::to_string(token))) return 99;
      int fd = open(m.path("d/f").c_str(), O_WRONLY | O_CREAT, 0644);
      return fd < 0 ? errno : E(close(fd));
    });
  };
  EXPECT_EQ(EIO, write_d(3));
  EXPECT_EQ(0, write_d(4));
}

// recover writes the state's files as root, by name: a state directory that group or others may
// write is refused, as the daemon refuses it, and nothing in it changes.
TEST(FencectlRecover, RefusesAStateDirectoryOthersMayWrite) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 3, "f", "x"));
  ASSERT_EQ(0, m.unmount());
  std::string dir = state_dir(m);
  std::string before = sh_out("cd '" + dir + "' && md5sum * | sort");
  ASSERT_EQ(0, chmod(dir.c_str(), 0777));
  std::string args = "recover --state '" + dir + "' --floor 9";
  int st;
  std::string out = sh_out(ctl_cmd(args + " 2>&1"), &st);
  EXPECT_EQ(215, st);  // exit_code::kFailed
  EXPECT_NE(std::string::npos, out.find("with mode 777")) << out;
  auto v = ctl_json(args + " --json", &st);
  EXPECT_EQ(215, st);
  ASSERT_TRUE(v);
  EXPECT_EQ("false", S(*v, "ok"));
  EXPECT_EQ("EPERM", S(*v, "error"));
  EXPECT_EQ(before, sh_out("cd '" + dir + "' && md5sum * | sort"));
  ASSERT_EQ(0, chmod(dir.c_str(), 0700));
  sh_out(ctl_cmd(args), &st);
  EXPECT_EQ(0, st);
}

// Whoever may write BACKING's root can put a link at BACKING/.fencefs (the default state=) that
// points at a state directory of root's elsewhere: recover, as root, would rewrite that one.
// A link in a directory others may write is refused; nothing where it points changes.
TEST(FencectlRecover, RefusesALinkInADirectoryOthersMayWrite) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 3, "f", "x"));
  ASSERT_EQ(0, m.unmount());
  std::string link = state_dir(m), elsewhere = m.root() + "/elsewhere";
  ASSERT_EQ(0, rename(link.c_str(), elsewhere.c_str()));
  ASSERT_EQ(0, symlink(elsewhere.c_str(), link.c_str()));
  ASSERT_EQ(0, chmod(m.backing().c_str(), 0777));
  std::string before = sh_out("cd '" + elsewhere + "' && md5sum * | sort");
  std::string args = "recover --state '" + link + "' --floor 9";
  int st;
  std::string out = sh_out(ctl_cmd(args + " 2>&1"), &st);
  EXPECT_EQ(215, st) << out;  // exit_code::kFailed
  EXPECT_NE(std::string::npos, out.find("is a symbolic link in a directory others may write"))
      << out;
  EXPECT_EQ(before, sh_out("cd '" + elsewhere + "' && md5sum * | sort"));
  // Root's own link in root's own directory is the operator's.
  ASSERT_EQ(0, chmod(m.backing().c_str(), 0755));
  sh_out(ctl_cmd(args), &st);
  EXPECT_EQ(0, st);
  ASSERT_EQ(0, unlink(link.c_str()));
  ASSERT_EQ(0, rename(elsewhere.c_str(), link.c_str()));
}

// --- Metrics -------------------------------------------------------------------------------------

TEST(MetricsValidator, AcceptsValidAndRejectsInvalid) {
  const std::string good =
      "# HELP a_total A counter.\n# TYPE a_total counter\na_total{x=\"q\\\"\\\\\\n\"} 3\n"
      "# TYPE h histogram\nh_bucket{le=\"0.1\"} 1\nh_bucket{le=\"1\"} 2\n"
      "h_bucket{le=\"+Inf\"} 2\nh_sum 0.5\nh_count 2\n# TYPE g gauge\ng 1e3\n";
  EXPECT_EQ("", validate_prometheus(good, nullptr));
  const char* bad[] = {
      "# TYPE a counter\na 1\n",                                      // counter without _total
      "a_total 1\n",                                                  // no TYPE
      "# TYPE a_total counter\n# TYPE a_total counter\na_total 1\n",  // two TYPE lines
      "# TYPE g gauge\ng{x=\"a\\q\"} 1\n",                            // bad escape
      "# TYPE g gauge\ng{x=\"a} 1\n",                                 // unterminated
      "# TYPE g gauge\ng{1x=\"a\"} 1\n",                              // bad label name
      "# TYPE g gauge\ng one\n",                                      // bad value
      "# TYPE g gauge\ng 1\n# TYPE f gauge\nf 1\ng 2\n",              // not contiguous
      "# TYPE g gauge\ng 1\ng 2\n",                                   // duplicate series
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",  // no +Inf
      "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",        // no _sum
      "# TYPE g gauge\ng 1",                                             // no final newline
  };
  for (const char* b : bad) EXPECT_NE("", validate_prometheus(b, nullptr)) << b;
}

TEST(Metrics, ValidPrometheusTextAndCountersMove) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "f", "x"));
  std::map<std::string, PromFamily> fam;
  std::string text = slurp(m.path(".fencefs/metrics"));
  ASSERT_EQ("", validate_prometheus(text, &fam)) << text;
  for (const char* f :
       {"fencefs_operations_total", "fencefs_advances_total", "fencefs_epoch",
        "fencefs_journal_bytes", "fencefs_audit_bytes", "fencefs_audit_write_failures_total"})
    EXPECT_TRUE(fam.count(f)) << f << " missing:\n" << text;
  double stale0 = sample_value(fam, "fencefs_operations_total", {{"result", "stale"}});
  double adv0 = sample_value(fam, "fencefs_advances_total", {{"domain", "/"}});
  ASSERT_GE(stale0, 0);
  EXPECT_EQ(1, adv0);
  EXPECT_EQ(2, sample_value(fam, "fencefs_epoch", {{"domain", "/"}}));
  EXPECT_EQ(0, sample_value(fam, "fencefs_audit_write_failures_total", {}));

  // One refused system call moves the stale counter; an advance moves advances and the epoch.
  EXPECT_EQ(ESTALE,
            as_superseded_job(
                m, 2,
                [&] {
                  int fd = open(m.path("f").c_str(), O_WRONLY);
                  return fd < 0 ? errno : 0;
                },
                [&] { return sh(ctl_cmd("advance --mount '" + m.mnt() + "' / 5 >/dev/null")); }));
  text = slurp(m.path(".fencefs/metrics"));
  ASSERT_EQ("", validate_prometheus(text, &fam)) << text;
  EXPECT_GT(sample_value(fam, "fencefs_operations_total", {{"result", "stale"}}), stale0);
  EXPECT_EQ(2, sample_value(fam, "fencefs_advances_total", {{"domain", "/"}}));
  EXPECT_EQ(5, sample_value(fam, "fencefs_epoch", {{"domain", "/"}}));
  EXPECT_GT(sample_value(fam, "fencefs_audit_bytes", {}), 0);

  // A domain whose name needs escaping in a label value keeps the page valid.
  ASSERT_EQ(0, as_job(m, 5, [&] { return E(mkdir(m.path("we\"ird\\dir").c_str(), 0755)); }));
  ASSERT_EQ(0, sh(ctl_cmd("domain add '" + m.path("we\"ird\\dir") + "' >/dev/null")));
  text = slurp(m.path(".fencefs/metrics"));
  ASSERT_EQ("", validate_prometheus(text, &fam)) << text;
  EXPECT_EQ(0, sample_value(fam, "fencefs_epoch", {{"domain", "/we\"ird\\dir"}}));
}

// One refused system call is one refusal in the counters, as in the audit trail, although the
// kernel sends a path operation refused with ESTALE twice.
TEST(Metrics, OneStaleCallCountsOnce) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "f", "x"));
  EXPECT_EQ(ESTALE, as_superseded_job(m, 2, [&] { return E(mkdir(m.path("d").c_str(), 0755)); }));
  std::map<std::string, PromFamily> fam;
  std::string text = slurp(m.path(".fencefs/metrics"));
  ASSERT_EQ("", validate_prometheus(text, &fam)) << text;
  EXPECT_EQ(1, sample_value(fam, "fencefs_operations_total", {{"result", "stale"}}));
}

// The metrics page carries a histogram of journal fsync latency.
TEST(Metrics, HasAnFsyncLatencyHistogram) {
  Mount m;
  ASSERT_EQ(0, write_file(m, 2, "f", "x"));
  std::map<std::string, PromFamily> fam;
  std::string text = slurp(m.path(".fencefs/metrics"));
  ASSERT_EQ("", validate_prometheus(text, &fam)) << text;
  bool found = false;
  for (auto& [name, f] : fam)
    if (f.type == "histogram" && name.find("fsync") != std::string::npos) {
      found = true;
      EXPECT_GE(sample_value(fam, name, {{"le", "+Inf"}}), 1) << name << " counted no fsync";
    }
  EXPECT_TRUE(found) << "no histogram family named *fsync* in:\n" << text;
}
