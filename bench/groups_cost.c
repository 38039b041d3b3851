/* What checking permissions in the daemon would cost per request: FUSE requests carry the
 * caller's uid, gid and pid, not its supplementary groups (nor its capabilities), so a daemon
 * reads them from /proc/PID/task/PID/status, as libfuse 3.14's fuse_req_getgroups does: open,
 * read, parse the "Groups:" line, close.
 * Usage: groups_cost N. Times N reads of a live child's status; prints us_per_read. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int groups_of(const char *path, gid_t *out, int max) {
  char buf[4096];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = strstr(buf, "\nGroups:");
  if (!p) return -1;
  p += 8;
  int k = 0;
  while (k < max) {
    char *end;
    unsigned long g = strtoul(p, &end, 10);
    if (end == p) break;
    out[k++] = (gid_t)g;
    p = end;
  }
  return k;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 0;
  if (n <= 0) {
    fprintf(stderr, "usage: groups_cost N\n");
    return 2;
  }
  pid_t kid = fork();
  if (kid < 0) return 1;
  if (kid == 0) {
    pause();
    _exit(0);
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)kid, (int)kid);
  gid_t groups[256];
  struct timespec a, b;
  int rc = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < n && rc == 0; i++)
    if (groups_of(path, groups, 256) < 0) rc = 1;
  clock_gettime(CLOCK_MONOTONIC, &b);
  kill(kid, SIGKILL);
  waitpid(kid, NULL, 0);
  if (rc) {
    fprintf(stderr, "groups_cost: cannot read %s\n", path);
    return 1;
  }
  double us = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n;
  printf("reads %ld\nus_per_read %.2f\n", n, us);
  return 0;
}
