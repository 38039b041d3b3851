// The bindings log across a daemon restart, with this test's own process as the bound one: what a
// rebinding left (the tokens its older children keep) comes back whole; a line cut short by a
// crash, or one naming an impossible token, is not taken.
#include "daemon/binding_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "common/proc.h"

namespace fencefs::daemon {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fencefs-bindstore-XXXXXX";
    if (mkdtemp(tmpl)) path = tmpl;
  }
  ~TempDir() {
    if (!path.empty()) std::system(("rm -rf '" + path + "'").c_str());
  }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The store, fed by `b` as the daemon's is.
void attach(BindingStore& store, fence::Bindings& b) {
  b.on_change = [&](pid_t pid, uint32_t domain) { store.record(b, pid, domain); };
}

TEST(BindingStore, ARebindingsHistoryComesBackAfterARestart) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::optional<fence::Bindings::Entry> before;
  {
    BindingStore store(dir.path);
    fence::Bindings b;
    store.restore(b, [](uint32_t) { return true; });
    attach(store, b);
    ASSERT_EQ(0, b.bind(getpid(), 3, 7));
    ASSERT_EQ(0, b.bind(getpid(), 3, 8));
    ASSERT_EQ(0, b.unbind(getpid(), 3));
    before = b.find(getpid());
    ASSERT_TRUE(before);
    ASSERT_EQ(3u, before->earlier.at(3).size());
  }
  BindingStore store(dir.path);
  fence::Bindings b;
  auto r = store.restore(b, [](uint32_t) { return true; });
  EXPECT_EQ(1u, r.restored);
  auto after = b.find(getpid());
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->tokens.empty()) << "unbound before the restart";
  EXPECT_EQ(before->earlier, after->earlier);
  // And once more, from the file the restart rewrote.
  fence::Bindings again;
  EXPECT_EQ(1u, BindingStore(dir.path).restore(again, [](uint32_t) { return true; }).restored);
  EXPECT_EQ(before->earlier, again.find(getpid())->earlier);
}

TEST(BindingStore, ALineCutShortOrImpossibleIsNotTaken) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  {
    BindingStore store(dir.path);
    fence::Bindings b;
    store.restore(b, [](uint32_t) { return true; });
    attach(store, b);
    ASSERT_EQ(0, b.bind(getpid(), 1, 5));
  }
  const std::string file = dir.path + "/bindings";
  std::string text = slurp(file);
  std::istringstream lines(text);
  std::string head, line;
  std::getline(lines, head);
  std::getline(lines, line);
  ASSERT_EQ('S', line[0]) << text;
  auto restored = [&](const std::string& body) {
    std::ofstream(file, std::ios::trunc) << head << "\n" << body;
    fence::Bindings b;
    return BindingStore(dir.path).restore(b, [](uint32_t) { return true; }).restored;
  };
  // "S PID START INO DOMAIN": the process and domain, before the token and the history.
  size_t at = 0;
  for (int k = 0; k < 5; k++) at = line.find(' ', at + 1);
  const std::string who = line.substr(0, at);
  EXPECT_EQ(1u, restored(line + "\n"));
  EXPECT_EQ(0u, restored(line)) << "no newline: cut short";
  EXPECT_EQ(0u, restored(who + " -5\n"));
  EXPECT_EQ(0u, restored(who + " 9223372036854775808\n")) << "above the largest token";
  EXPECT_EQ(0u, restored(who + " 5 12:x:0\n"));
  EXPECT_EQ(0u, restored(who + " 5 12:4:2\n"));
  EXPECT_EQ(1u, restored(who + " 5 12:4:0\n"));
}

}  // namespace
}  // namespace fencefs::daemon
