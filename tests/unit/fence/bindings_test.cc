// Process bindings over an in-memory process table: the walk up the parent chain (no depth
// limit), nearest-wins, threads, exact identity under pid reuse, reparenting after an exit.
#include "fence/bindings.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "unit/fence/fake_processes.h"

namespace fencefs::fence {
namespace {

using testing::FakeProcesses;

TEST(Bindings, NoBindingNoToken) {
  FakeProcesses p;
  Bindings b(p);
  pid_t job = p.spawn(1);
  EXPECT_EQ(0u, b.resolve(job, 0));
}

TEST(Bindings, ProcessAndDescendantsPresentTheToken) {
  FakeProcesses p;
  Bindings b(p);
  pid_t shell = p.spawn(1);
  ASSERT_EQ(0, b.bind(shell, 0, 5));
  pid_t child = p.spawn(shell), grandchild = p.spawn(child);
  EXPECT_EQ(5u, b.resolve(shell, 0));
  EXPECT_EQ(5u, b.resolve(child, 0));
  EXPECT_EQ(5u, b.resolve(grandchild, 0));
  EXPECT_EQ(0u, b.resolve(grandchild, 1)) << "another domain";
  pid_t outsider = p.spawn(1);
  EXPECT_EQ(0u, b.resolve(outsider, 0));
}

TEST(Bindings, NearestBoundAncestorWins) {
  FakeProcesses p;
  Bindings b(p);
  pid_t shell = p.spawn(1);
  ASSERT_EQ(0, b.bind(shell, 0, 5));
  ASSERT_EQ(0, b.bind(shell, 1, 9));
  pid_t child = p.spawn(shell);
  ASSERT_EQ(0, b.bind(child, 0, 7));
  pid_t grandchild = p.spawn(child);
  EXPECT_EQ(7u, b.resolve(grandchild, 0));
  EXPECT_EQ(9u, b.resolve(grandchild, 1));
  EXPECT_EQ(5u, b.resolve(shell, 0));
  ASSERT_EQ(0, b.unbind(child, 0));
  pid_t later = p.spawn(child);
  EXPECT_EQ(5u, b.resolve(later, 0)) << "a job started after the unbind";
  EXPECT_EQ(7u, b.resolve(grandchild, 0)) << "one started before keeps its token";
  EXPECT_EQ(ENOENT, b.unbind(child, 0)) << "nothing left to unbind";
  EXPECT_EQ(ENOENT, b.unbind(grandchild, 1));
  EXPECT_EQ(9u, b.resolve(grandchild, 1));
}

TEST(Bindings, ThreadsBindAndResolveAsTheirProcess) {
  FakeProcesses p;
  Bindings b(p);
  pid_t job = p.spawn(1);
  pid_t t1 = p.thread(job), t2 = p.thread(job);
  ASSERT_EQ(0, b.bind(t1, 0, 3));  // a thread binds its whole process
  EXPECT_EQ(3u, b.resolve(t2, 0));
  EXPECT_EQ(3u, b.resolve(job, 0));
  auto list = b.list();
  ASSERT_EQ(1u, list.size());
  EXPECT_EQ(job, list[0].pid);
}

TEST(Bindings, NoDepthLimit) {
  FakeProcesses p;
  Bindings b(p);
  pid_t top = p.spawn(1);
  ASSERT_EQ(0, b.bind(top, 0, 4));
  pid_t cur = top;
  for (int k = 0; k < 1000; k++) cur = p.spawn(cur);
  EXPECT_EQ(4u, b.resolve(cur, 0)) << "1000 levels below the binder";
  EXPECT_EQ(4u, b.resolve(cur, 0)) << "and again, from the cache or afresh";
  EXPECT_EQ(p.open_handles(), b.cached_handles()) << "a long walk leaves no handle open";
  pid_t below = p.spawn(p.spawn(top));
  EXPECT_EQ(4u, b.resolve(below, 0));
  p.exit(top);
  EXPECT_EQ(0u, b.resolve(cur, 0)) << "a chain too long to watch is resolved afresh";
  EXPECT_EQ(0u, b.resolve(below, 0));
}

TEST(Bindings, RecycledPidNeverInheritsADeadBindersToken) {
  FakeProcesses p;
  Bindings b(p);
  pid_t binder = p.spawn(1, 500);
  ASSERT_EQ(0, b.bind(binder, 0, 6));
  pid_t child = p.spawn(binder);
  EXPECT_EQ(6u, b.resolve(child, 0));
  p.exit(binder);
  p.exit(child);
  // The same pid, a different process (a start time equal to the tick would not tell them apart).
  pid_t again = p.spawn(1, 500);
  ASSERT_EQ(500, again);
  EXPECT_EQ(0u, b.resolve(again, 0));
  EXPECT_TRUE(b.list().empty()) << "the dead binder's entry is dropped";
  // The recycled process may bind for itself; the old tokens are not merged in.
  ASSERT_EQ(0, b.bind(again, 1, 2));
  pid_t its_child = p.spawn(again);
  EXPECT_EQ(0u, b.resolve(its_child, 0));
  EXPECT_EQ(2u, b.resolve(its_child, 1));
}

TEST(Bindings, ReparentedChildLosesTheDeadParentsToken) {
  FakeProcesses p;
  Bindings b(p);
  pid_t parent = p.spawn(1);
  ASSERT_EQ(0, b.bind(parent, 0, 5));
  pid_t child = p.spawn(parent), grandchild = p.spawn(child);
  EXPECT_EQ(5u, b.resolve(grandchild, 0));  // cached now
  EXPECT_EQ(5u, b.resolve(child, 0));
  p.exit(parent);  // child goes to init
  EXPECT_EQ(0u, b.resolve(child, 0));
  EXPECT_EQ(0u, b.resolve(grandchild, 0)) << "a cached resolution noticed the reparenting";
}

TEST(Bindings, IntermediateExitIsNoticedToo) {
  FakeProcesses p;
  Bindings b(p);
  pid_t top = p.spawn(1);
  ASSERT_EQ(0, b.bind(top, 0, 5));
  pid_t mid = p.spawn(top), low = p.spawn(mid), leaf = p.spawn(low);
  EXPECT_EQ(5u, b.resolve(leaf, 0));
  p.exit(mid);  // low goes to init: the chain from leaf no longer reaches top
  EXPECT_EQ(0u, b.resolve(leaf, 0));
}

TEST(Bindings, ReparentedToABoundSubreaperPresentsItsToken) {
  FakeProcesses p;
  Bindings b(p);
  pid_t runner = p.spawn(1);  // like `fencectl run`: a subreaper that bound itself
  p.set_subreaper(runner);
  ASSERT_EQ(0, b.bind(runner, 0, 3));
  pid_t job = p.spawn(runner), forked = p.spawn(job);
  ASSERT_EQ(0, b.bind(forked, 0, 4));
  pid_t orphan = p.spawn(forked);
  EXPECT_EQ(4u, b.resolve(orphan, 0));
  p.exit(forked);  // orphan goes to runner
  EXPECT_EQ(3u, b.resolve(orphan, 0));
  p.exit(job);
  EXPECT_EQ(3u, b.resolve(orphan, 0));
}

// A shell that binds anew hands the new token to the jobs it starts next, never to one it
// started before (nor to that job's own children, even those started later): a paused job of
// the old owner must not wake up as the new one.
TEST(Bindings, ARebindingReachesOnlyJobsStartedAfterIt) {
  FakeProcesses p;
  Bindings b(p);
  pid_t shell = p.spawn(1);
  ASSERT_EQ(0, b.bind(shell, 0, 1));
  pid_t old_job = p.spawn(shell);
  EXPECT_EQ(1u, b.resolve(old_job, 0));
  ASSERT_EQ(0, b.bind(shell, 0, 2));
  pid_t new_job = p.spawn(shell), old_child = p.spawn(old_job);
  ASSERT_EQ(0, b.bind(shell, 0, 3));
  pid_t newest = p.spawn(shell);
  EXPECT_EQ(3u, b.resolve(shell, 0));
  EXPECT_EQ(1u, b.resolve(old_job, 0)) << "a cached resolution follows the rebinding";
  EXPECT_EQ(1u, b.resolve(old_child, 0));
  EXPECT_EQ(2u, b.resolve(new_job, 0));
  EXPECT_EQ(3u, b.resolve(newest, 0));
  EXPECT_EQ(0, b.bind(shell, 0, 3)) << "the same token again changes nothing";
  EXPECT_EQ(2u, b.resolve(new_job, 0));
  auto e = b.find(shell);
  ASSERT_TRUE(e);
  EXPECT_EQ(3u, e->earlier.at(0).size());
}

// A job started before its shell's first binding presents what it had: its other ancestors'.
TEST(Bindings, AJobStartedBeforeTheFirstBindingKeepsWhatItHad) {
  FakeProcesses p;
  Bindings b(p);
  pid_t outer = p.spawn(1);
  ASSERT_EQ(0, b.bind(outer, 0, 9));
  pid_t shell = p.spawn(outer), before = p.spawn(shell);
  ASSERT_EQ(0, b.bind(shell, 0, 5));
  pid_t after = p.spawn(shell);
  EXPECT_EQ(9u, b.resolve(before, 0));
  EXPECT_EQ(5u, b.resolve(after, 0));
  EXPECT_EQ(0u, b.resolve(before, 1)) << "a domain the shell never bound";
}

// The history is bounded: past kMaxSuperseded changes, the oldest jobs present nothing (refused),
// never a later owner's token.
TEST(Bindings, FoldedHistoryPresentsNothingToTheOldestJobs) {
  FakeProcesses p;
  Bindings b(p);
  pid_t shell = p.spawn(1);
  ASSERT_EQ(0, b.bind(shell, 0, 1));
  pid_t first = p.spawn(shell);
  std::vector<pid_t> jobs;
  for (Epoch t = 2; t < 2 + Bindings::kMaxSuperseded + 2; t++) {
    ASSERT_EQ(0, b.bind(shell, 0, t));
    jobs.push_back(p.spawn(shell));
  }
  EXPECT_EQ(0u, b.resolve(first, 0));
  EXPECT_EQ(0u, b.resolve(jobs[0], 0));
  EXPECT_EQ(Bindings::kMaxSuperseded + 3, b.resolve(jobs.back(), 0));
  EXPECT_EQ(Bindings::kMaxSuperseded + 2, b.resolve(jobs.end()[-2], 0));
  EXPECT_EQ(Bindings::kMaxSuperseded, b.find(shell)->earlier.at(0).size());
}

// A process that unbound stays known while it lives, for its earlier children, but is not listed
// as bound; restore() puts back what a daemon before a restart had.
TEST(Bindings, UnboundWithHistoryIsNotListedAndRestores) {
  FakeProcesses p;
  Bindings b(p);
  pid_t shell = p.spawn(1);
  ASSERT_EQ(0, b.bind(shell, 0, 4));
  pid_t job = p.spawn(shell);
  ASSERT_EQ(0, b.unbind(shell, 0));
  EXPECT_TRUE(b.list().empty());
  ASSERT_EQ(1u, b.list(true).size());
  auto e = *b.find(shell);
  Bindings again(p);
  ASSERT_EQ(0, again.restore(shell, 0, std::nullopt, e.earlier.at(0)));
  EXPECT_EQ(4u, again.resolve(job, 0));
  EXPECT_EQ(0u, again.resolve(p.spawn(shell), 0));
  EXPECT_EQ(ESRCH, again.restore(12345, 0, 1, {}));
  EXPECT_EQ(ESRCH, again.restore(shell, 1, 3, {}, [] { return false; })) << "not the same one";
  EXPECT_EQ(0u, again.resolve(p.spawn(shell), 1));
}

// A process with a dead binder's pid unbinds nothing of it, and finds nothing of it: the dead
// binder's history must not be carried over to the newcomer (a restart would restore it).
TEST(Bindings, ARecycledPidCannotUnbindOrFindADeadBindersEntry) {
  FakeProcesses p;
  Bindings b(p);
  pid_t binder = p.spawn(1, 700);
  ASSERT_EQ(0, b.bind(binder, 0, 6));
  p.exit(binder);
  pid_t again = p.spawn(1, 700);
  ASSERT_EQ(700, again);
  EXPECT_EQ(ENOENT, b.unbind(again, 0));
  EXPECT_FALSE(b.find(again));
}

// Past the chain length the cache watches, the ancestor's child on the chain is still the real
// one: an old job's deep descendant keeps the old token.
TEST(Bindings, AVeryDeepDescendantOfAnOldJobKeepsTheOldToken) {
  FakeProcesses p;
  Bindings b(p);
  pid_t shell = p.spawn(1);
  ASSERT_EQ(0, b.bind(shell, 0, 1));
  pid_t old_job = p.spawn(shell);
  ASSERT_EQ(0, b.bind(shell, 0, 2));
  pid_t cur = old_job;
  for (int k = 0; k < 300; k++) cur = p.spawn(cur);
  EXPECT_EQ(1u, b.resolve(cur, 0));
  pid_t fresh = p.spawn(shell);
  for (int k = 0; k < 300; k++) fresh = p.spawn(fresh);
  EXPECT_EQ(2u, b.resolve(fresh, 0));
}

// Without an order of processes (no thread could be made) nothing is bound or unbound; an unbind
// that changes nothing asks for none (anyone may write it, as often as they like).
TEST(Bindings, NoOrderNoChange) {
  FakeProcesses p;
  Bindings b(p);
  pid_t shell = p.spawn(1);
  ASSERT_EQ(0, b.bind(shell, 0, 1));
  size_t calls = p.floor_calls();
  EXPECT_EQ(0, b.bind(shell, 0, 1)) << "the same token again: nothing to order";
  EXPECT_EQ(ENOENT, b.unbind(shell, 1));
  EXPECT_EQ(ENOENT, b.unbind(p.spawn(1), 0));
  EXPECT_EQ(calls, p.floor_calls());
  p.fail_floor(true);
  EXPECT_EQ(EAGAIN, b.bind(shell, 0, 2));
  EXPECT_EQ(EAGAIN, b.unbind(shell, 0));
  EXPECT_EQ(1u, b.resolve(p.spawn(shell), 0));
}

TEST(Bindings, VanishedCallerCannotBind) {
  FakeProcesses p;
  Bindings b(p);
  pid_t gone = p.spawn(1);
  p.exit(gone);
  EXPECT_EQ(ESRCH, b.bind(gone, 0, 1));
  EXPECT_EQ(0u, b.resolve(gone, 0));
}

TEST(Bindings, CacheHandlesAreBoundedAndReleased) {
  FakeProcesses p;
  {
    Bindings b(p);
    pid_t top = p.spawn(1);
    ASSERT_EQ(0, b.bind(top, 0, 1));
    pid_t cur = top;
    for (int k = 0; k < 50; k++) cur = p.spawn(cur);
    for (int k = 0; k < 500; k++) {
      pid_t leaf = p.spawn(cur);
      EXPECT_EQ(1u, b.resolve(leaf, 0));
      p.exit(leaf);
    }
    EXPECT_LE(b.cached_handles(), 4096u);
    EXPECT_EQ(p.open_handles(), b.cached_handles()) << "nothing else left open";
  }
  EXPECT_EQ(0u, p.open_handles());
}

}  // namespace
}  // namespace fencefs::fence
