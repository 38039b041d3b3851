/* The legacy-job pattern: create a temp file, write 4 KiB, close, rename it over the final name.
 * Usage: legacy_job DIR NFILES NTHREADS
 * DIR is created if missing. Each thread works in its own subdirectory DIR/tN (created, untimed)
 * and handles NFILES/NTHREADS jobs. The timed part starts when every thread is ready and ends when
 * the last one finishes. Prints "files N", "seconds S", "files_per_s R". Exit status non-zero on
 * any error. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *g_dir;
static long g_per_thread;
static pthread_barrier_t g_start;
static volatile int g_failed;
static double g_start_t[1024], g_end_t[1024];

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
  long t = (long)arg;
  char sub[4096], tmp[4200], fin[4200];
  char buf[4096];
  memset(buf, 'a' + (int)(t % 26), sizeof buf);
  snprintf(sub, sizeof sub, "%s/t%ld", g_dir, t);
  if (mkdir(sub, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "legacy_job: mkdir %s: %s\n", sub, strerror(errno));
    g_failed = 1;
  }
  pthread_barrier_wait(&g_start);
  if (g_failed) return NULL;
  g_start_t[t] = now();
  for (long i = 0; i < g_per_thread; i++) {
    snprintf(tmp, sizeof tmp, "%s/.out-%ld.tmp", sub, i);
    snprintf(fin, sizeof fin, "%s/out-%ld", sub, i);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      fprintf(stderr, "legacy_job: open %s: %s\n", tmp, strerror(errno));
      g_failed = 1;
      return NULL;
    }
    ssize_t n = write(fd, buf, sizeof buf);
    if (n != (ssize_t)sizeof buf) {
      fprintf(stderr, "legacy_job: write %s: %s\n", tmp, n < 0 ? strerror(errno) : "short write");
      g_failed = 1;
      close(fd);
      return NULL;
    }
    if (close(fd) != 0) {
      fprintf(stderr, "legacy_job: close %s: %s\n", tmp, strerror(errno));
      g_failed = 1;
      return NULL;
    }
    if (rename(tmp, fin) != 0) {
      fprintf(stderr, "legacy_job: rename %s: %s\n", tmp, strerror(errno));
      g_failed = 1;
      return NULL;
    }
  }
  g_end_t[t] = now();
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: legacy_job DIR NFILES NTHREADS\n");
    return 2;
  }
  g_dir = argv[1];
  long nfiles = atol(argv[2]);
  long nthreads = atol(argv[3]);
  if (nfiles <= 0 || nthreads <= 0 || nthreads > 1024) {
    fprintf(stderr, "legacy_job: bad arguments\n");
    return 2;
  }
  g_per_thread = nfiles / nthreads;
  if (mkdir(g_dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "legacy_job: mkdir %s: %s\n", g_dir, strerror(errno));
    return 1;
  }
  pthread_t th[1024];
  pthread_barrier_init(&g_start, NULL, (unsigned)nthreads + 1);
  for (long t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
  pthread_barrier_wait(&g_start);
  for (long t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  if (g_failed) return 1;
  /* From the first thread's start to the last one's end (each thread stamps its own times: the
   * main thread may be scheduled late after the barrier). */
  double t0 = g_start_t[0], t1 = g_end_t[0];
  for (long t = 1; t < nthreads; t++) {
    if (g_start_t[t] < t0) t0 = g_start_t[t];
    if (g_end_t[t] > t1) t1 = g_end_t[t];
  }
  double el = t1 - t0;
  long done = g_per_thread * nthreads;
  printf("files %ld\nseconds %.6f\nfiles_per_s %.1f\n", done, el, done / el);
  return 0;
}
