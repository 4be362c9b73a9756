/* The machine's read bandwidth with 1..N threads: the floor under a decode step that reads every
   weight once (docs/engine.md, "Decode steps of one to four rows"). Each thread sums its share of
   a 1 GiB buffer with 32-byte loads, software prefetches PF bytes ahead (0: none); best of 5.

       cc -O2 -mavx2 -pthread scripts/read_bandwidth.c -o /tmp/read_bandwidth
       /tmp/read_bandwidth THREADS [PF]
*/
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const size_t kBytes = (size_t)1 << 30;
static char* buf;
static int threads;
static size_t ahead;
static volatile long long sink;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void* part(void* arg) {
  size_t share = kBytes / (size_t)threads;
  const char* p = buf + (size_t)(long)arg * share;
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i < share; i += 128) {
    if (ahead) {
      _mm_prefetch(p + i + ahead, _MM_HINT_T0);
      _mm_prefetch(p + i + ahead + 64, _MM_HINT_T0);
    }
    a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i*)(p + i)));
    b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i*)(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i*)(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i*)(p + i + 96)));
  }
  long long out[4];
  _mm256_storeu_si256((__m256i*)out, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  sink += out[0] + out[1] + out[2] + out[3];
  return NULL;
}

int main(int argc, char** argv) {
  threads = argc > 1 ? atoi(argv[1]) : 1;
  ahead = argc > 2 ? (size_t)atol(argv[2]) : 0;
  if (threads < 1 || threads > 64) {
    fprintf(stderr, "usage: %s THREADS [PREFETCH_BYTES]\n", argv[0]);
    return 2;
  }
  buf = aligned_alloc(64, kBytes);
  if (buf == NULL) {
    fprintf(stderr, "no memory for 1 GiB\n");
    return 1;
  }
  memset(buf, 1, kBytes);
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    pthread_t th[64];
    double t0 = now();
    for (long i = 0; i < threads; ++i) pthread_create(&th[i], NULL, part, (void*)i);
    for (int i = 0; i < threads; ++i) pthread_join(th[i], NULL);
    double t = now() - t0;
    if (t < best) best = t;
  }
  printf("%d thread(s), prefetch %zu: %.1f GB/s (best of 5)\n", threads, ahead, kBytes / best / 1e9);
  return 0;
}
