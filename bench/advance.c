/* Epoch advances per second, one thread per domain.
 * Usage: advance MNT NDOMAINS SECONDS BASE_TOKEN
 * Thread k (1..NDOMAINS) advances domain /dk with increasing tokens for SECONDS, each one an
 * ioctl(FENCEFS_IOC_ADVANCE) on the domain's root directory. (Writes to .fencefs/ctl would be
 * serialised by the kernel's per-file write lock, hiding the journal's group commit.)
 * The first token of a domain is max(BASE_TOKEN, epoch+1), the epoch read from the
 * user.fencefs.epoch xattr of MNT/dk when available. Prints advances, seconds, advances_per_s. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "fencefs/ioctl.h"

static const char *g_mnt;
static double g_secs;
static unsigned long long g_base;
static pthread_barrier_t g_start;
static volatile int g_failed;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct arg {
  long k;
  long count;
  double t0, t1;
};

static void *worker(void *p) {
  struct arg *a = p;
  char path[4200], val[64];
  unsigned long long tok = g_base;
  snprintf(path, sizeof path, "%s/d%ld", g_mnt, a->k);
  ssize_t n = getxattr(path, "user.fencefs.epoch", val, sizeof val - 1);
  if (n > 0) {
    val[n] = 0;
    unsigned long long e = strtoull(val, NULL, 10);
    if (e + 1 > tok) tok = e + 1;
  }
  pthread_barrier_wait(&g_start);
  a->t0 = now();
  double end = a->t0 + g_secs;
  int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    fprintf(stderr, "advance: open %s: %s\n", path, strerror(errno));
    g_failed = 1;
  }
  while (!g_failed) {
    struct fencefs_token t;
    memset(&t, 0, sizeof t);
    t.epoch = tok;
    if (ioctl(dfd, FENCEFS_IOC_ADVANCE, &t) != 0) {
      fprintf(stderr, "advance: /d%ld %llu: %s\n", a->k, tok, strerror(errno));
      g_failed = 1;
      break;
    }
    a->count++;
    tok++;
    if ((a->count & 7) == 0 && now() >= end) break;
  }
  if (dfd >= 0) close(dfd);
  a->t1 = now();
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: advance MNT NDOMAINS SECONDS BASE_TOKEN\n");
    return 2;
  }
  g_mnt = argv[1];
  long k = atol(argv[2]);
  g_secs = atof(argv[3]);
  g_base = strtoull(argv[4], NULL, 10);
  if (k <= 0 || k > 1024 || g_secs <= 0 || g_base == 0) {
    fprintf(stderr, "advance: bad arguments\n");
    return 2;
  }
  pthread_t th[1024];
  struct arg args[1024];
  pthread_barrier_init(&g_start, NULL, (unsigned)k + 1);
  for (long i = 0; i < k; i++) {
    args[i].k = i + 1;
    args[i].count = 0;
    pthread_create(&th[i], NULL, worker, &args[i]);
  }
  pthread_barrier_wait(&g_start);
  for (long i = 0; i < k; i++) pthread_join(th[i], NULL);
  if (g_failed) return 1;
  double t0 = args[0].t0, t1 = args[0].t1; /* first start to last end, stamped by the threads */
  for (long i = 1; i < k; i++) {
    if (args[i].t0 < t0) t0 = args[i].t0;
    if (args[i].t1 > t1) t1 = args[i].t1;
  }
  double el = t1 - t0;
  long total = 0;
  for (long i = 0; i < k; i++) total += args[i].count;
  printf("advances %ld\nseconds %.6f\nadvances_per_s %.1f\n", total, el, total / el);
  return 0;
}
