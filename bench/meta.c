/* Metadata workload. Usage:
 *   meta run DIR N [LISTINGS]   create N empty files in DIR, stat them all, list DIR LISTINGS times
 *                               (default 3), unlink them all; prints ops/s for each phase. With
 *                               META_SECONDS=S, stat passes over the N files and listings repeat
 *                               until each phase has lasted S seconds: one pass of 10,000 cached
 *                               stats takes some 30 ms, too short to time on a shared machine
 *   meta create DIR N           create N empty files (no timing output beyond the total)
 *   meta stat DIR N [START]     stat files START..N-1 created by "create" (e.g. through a mount)
 * File names are f0000000 ... so "create" on the backing and "stat" through the mount agree.
 * With META_COLD=1, "run" also times stats of names no longer cached (stat_cold_ops_per_s: at
 * least a LOOKUP each, whatever the daemon's cache timeouts): it drops the kernel's dentries (as
 * root) before each pass over the N files, until the timed passes add up to META_SECONDS or make
 * 10, and drops them again before the unlinks.
 * With META_DAEMON_PID set, "run" also prints the daemon's CPU (utime + stime) per create, stat,
 * cold stat and unlink, in µs: create_daemon_us_per_op, stat_daemon_us_per_op,
 * stat_cold_daemon_us_per_op, unlink_daemon_us_per_op. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int dfd;
static long daemon_pid;

/* The daemon's utime + stime in clock ticks, or -1. */
static long daemon_ticks(void) {
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%ld/stat", daemon_pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t len = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (len <= 0) return -1;
  buf[len] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  unsigned long ut, st;
  /* After ")": state (3), then fields 4..13, utime (14), stime (15). */
  if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
    return -1;
  return (long)(ut + st);
}

static void print_daemon_cpu(const char *key, long t0, long n) {
  long t1 = daemon_pid > 0 ? daemon_ticks() : -1;
  if (t0 >= 0 && t1 >= 0) printf("%s %.2f\n", key, (t1 - t0) * 1e6 / sysconf(_SC_CLK_TCK) / n);
}

static void name(char *buf, long i) { snprintf(buf, 32, "f%07ld", i); }

static int do_create(long n) {
  char nm[32];
  for (long i = 0; i < n; i++) {
    name(nm, i);
    int fd = openat(dfd, nm, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      fprintf(stderr, "meta: create %s: %s\n", nm, strerror(errno));
      return -1;
    }
    close(fd);
  }
  return 0;
}

static int do_stat(long start, long n) {
  char nm[32];
  struct stat st;
  for (long i = start; i < n; i++) {
    name(nm, i);
    if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      fprintf(stderr, "meta: stat %s: %s\n", nm, strerror(errno));
      return -1;
    }
  }
  return 0;
}

static long do_list(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "meta: opendir %s: %s\n", dir, strerror(errno));
    return -1;
  }
  long cnt = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) cnt++;
  }
  closedir(d);
  return cnt;
}

/* Drops the kernel's unused dentries and inodes (root): each daemon is then asked to look every
 * name up again, whatever its cache timeouts. The FORGETs this sends are given a moment before the
 * next phase is timed. */
static int drop_dentries(void) {
  int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "2\n", 2) != 2) {
    fprintf(stderr, "meta: cannot drop the kernel's dentries: %s\n", strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  usleep(500000);
  return 0;
}

static int do_unlink(long n) {
  char nm[32];
  for (long i = 0; i < n; i++) {
    name(nm, i);
    if (unlinkat(dfd, nm, 0) != 0) {
      fprintf(stderr, "meta: unlink %s: %s\n", nm, strerror(errno));
      return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: meta run|create|stat DIR N [LISTINGS]\n");
    return 2;
  }
  const char *mode = argv[1], *dir = argv[2];
  long n = atol(argv[3]);
  long listings = argc > 4 && !strcmp(mode, "run") ? atol(argv[4]) : 3;
  if (n <= 0 || listings <= 0) {
    fprintf(stderr, "meta: bad arguments\n");
    return 2;
  }
  dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    fprintf(stderr, "meta: open %s: %s\n", dir, strerror(errno));
    return 1;
  }
  double t0, t1;
  if (!strcmp(mode, "create")) {
    t0 = now();
    if (do_create(n)) return 1;
    printf("create_ops_per_s %.1f\n", n / (now() - t0));
    return 0;
  }
  if (!strcmp(mode, "stat")) {
    long start = argc > 4 ? atol(argv[4]) : 0;
    if (start < 0 || start > n) {
      fprintf(stderr, "meta: bad START\n");
      return 2;
    }
    t0 = now();
    if (do_stat(start, n)) return 1;
    printf("stat_ops_per_s %.1f\n", (n - start) / (now() - t0));
    return 0;
  }
  if (strcmp(mode, "run")) {
    fprintf(stderr, "meta: unknown mode %s\n", mode);
    return 2;
  }
  const char *secs = getenv("META_SECONDS");
  char *end = NULL;
  double min_s = secs ? strtod(secs, &end) : 0;
  if (secs && (end == secs || *end || !(min_s >= 0 && min_s <= 3600))) {
    fprintf(stderr, "meta: META_SECONDS must be a number of seconds from 0 to 3600, not %s\n",
            secs);
    return 2;
  }
  const char *cold_env = getenv("META_COLD");
  int cold = cold_env && strcmp(cold_env, "1") == 0;
  if ((cold_env && !cold) || getenv("META_COLD_UNLINK")) {
    fprintf(stderr, "meta: META_COLD must be 1 or unset (META_COLD_UNLINK is now META_COLD=1)\n");
    return 2;
  }
  const char *pid = getenv("META_DAEMON_PID");
  daemon_pid = pid ? atol(pid) : 0;
  long ticks = daemon_pid > 0 ? daemon_ticks() : -1;
  t0 = now();
  if (do_create(n)) return 1;
  t1 = now();
  printf("create_ops_per_s %.1f\n", n / (t1 - t0));
  print_daemon_cpu("create_daemon_us_per_op", ticks, n);
  ticks = daemon_pid > 0 ? daemon_ticks() : -1;
  long stats = 0;
  t0 = now();
  do {
    if (do_stat(0, n)) return 1;
    stats += n;
  } while (now() - t0 < min_s);
  t1 = now();
  printf("stat_ops_per_s %.1f\n", stats / (t1 - t0));
  print_daemon_cpu("stat_daemon_us_per_op", ticks, stats);
  long total = 0;
  t0 = now();
  for (long r = 0; r < listings || now() - t0 < min_s; r++) {
    long c = do_list(dir);
    if (c != n) {
      fprintf(stderr, "meta: listing saw %ld entries, expected %ld\n", c, n);
      return 1;
    }
    total += c;
  }
  t1 = now();
  printf("list_entries_per_s %.1f\n", total / (t1 - t0));
  if (cold) {
    /* Timed passes add up to META_SECONDS (one pass may be a few tenths of a second), or stop at
     * 10: each drop waits 0.5 s, and where names stay cached (tmpfs itself) passes are short. The
     * drops and the waits are not timed, nor is the daemon's CPU for the FORGETs. */
    double timed = 0;
    long stats_cold = 0, cpu_ticks = 0;
    int cpu_ok = daemon_pid > 0;
    do {
      if (drop_dentries()) return 1;
      long before = cpu_ok ? daemon_ticks() : -1;
      t0 = now();
      if (do_stat(0, n)) return 1;
      timed += now() - t0;
      long after = cpu_ok ? daemon_ticks() : -1;
      if (before < 0 || after < 0) cpu_ok = 0;
      cpu_ticks += after - before;
      stats_cold += n;
    } while (timed < min_s && stats_cold < 10 * n);
    printf("stat_cold_ops_per_s %.1f\n", stats_cold / timed);
    if (cpu_ok)
      printf("stat_cold_daemon_us_per_op %.2f\n",
             cpu_ticks * 1e6 / sysconf(_SC_CLK_TCK) / stats_cold);
  }
  if (cold && drop_dentries()) return 1;
  ticks = daemon_pid > 0 ? daemon_ticks() : -1;
  t0 = now();
  if (do_unlink(n)) return 1;
  t1 = now();
  printf("unlink_ops_per_s %.1f\n", n / (t1 - t0));
  print_daemon_cpu("unlink_daemon_us_per_op", ticks, n);
  return 0;
}
