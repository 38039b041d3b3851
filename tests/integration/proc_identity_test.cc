// A process's identity: equal for every handle on it, different for every other process, a later
// one given the same pid included; with pidfs and as it is before Linux 6.9 without. A mount
// suite only to run alone (RUN_SERIAL): it rewinds the pids the kernel hands out.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/proc.h"

namespace fencefs::proc {
namespace {

pid_t child() {
  pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

void end(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// A child with pid `want` (free again): the next pid the kernel hands out is set just below it.
pid_t child_with_pid(pid_t want) {
  for (int tries = 0; tries < 20; tries++) {
    FILE* f = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (f == nullptr) return -1;
    fprintf(f, "%d", want - 1);
    fclose(f);
    pid_t pid = child();
    if (pid == want) return pid;
    end(pid);  // another process took it first
  }
  return -1;
}

void identities(ProcessInfo& procs) {
  if (geteuid() != 0) GTEST_SKIP() << "writing ns_last_pid needs root";
  pid_t a = child(), b = child();
  int ha = procs.open(a, false), ha2 = procs.open(a, false), hb = procs.open(b, false);
  ASSERT_GE(ha, 0);
  ASSERT_GE(hb, 0);
  const uint64_t ida = procs.id(ha);
  EXPECT_NE(0u, ida);
  EXPECT_EQ(ida, procs.id(ha2));
  EXPECT_NE(ida, procs.id(hb));
  procs.close(ha2);
  end(a);
  const uint64_t gone = procs.id(ha);
  EXPECT_TRUE(gone == 0 || gone == ida) << "a handle on a process gone is unknown (0) or keeps its "
                                           "identity (pidfs), never another's";
  // Past the start time's tick (10 ms): only root can make the kernel hand a pid out again
  // sooner, by writing ns_last_pid as below; cycling through every pid takes far longer.
  usleep(30000);
  pid_t again = child_with_pid(a);
  ASSERT_EQ(a, again) << "the pid could not be handed out again";
  int h = procs.open(again, false);
  EXPECT_NE(0u, procs.id(h));
  EXPECT_NE(ida, procs.id(h)) << "a later process with the same pid took the identity";
  procs.close(h);
  procs.close(ha);
  procs.close(hb);
  end(again);
  end(b);
}

TEST(ProcIdentity, WithPidfsOrWhateverThisKernelHas) { identities(system()); }

TEST(ProcIdentity, WithoutPidfsAProcessIsItsPidAndStartTime) {
  identities(*system_without_pidfs());
}

}  // namespace
}  // namespace fencefs::proc
