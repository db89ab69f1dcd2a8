/* What a cache line costs when another core touched it last (benchmarks/line_share.py).

   T OpenMP threads share one buffer of N floats; thread t's part is [t N / T, (t + 1) N / T).
   Each round runs every scenario once: a set-up phase, a barrier, then a timed phase (each thread
   times its own). The set-ups leave the lines where a team's kernels leave them:

     own-write     t wrote its part, then writes it again (lines in its own cache only: the
                   1-thread case)
     shared-write  every thread read the whole buffer, then t writes its part (a channel-split
                   conv's input, which every thread reads, reused for the next kernel's output)
     cold-write    the buffer evicted (EVICT floats read by the team), then t writes its part
     own-read      t wrote its part, then reads it
     other-read    t wrote its part, then reads thread t+1's part (a producer that is not the
                   consumer)
     all-read      t wrote its part, then reads the whole buffer (a channel-split conv reading
                   what the team wrote)

   Prints one line per scenario: its name, the bytes each thread touched in the timed phase, then
   per round the slowest thread's seconds.

     cc -O3 -march=native -fopenmp line_share.c -o line_share && ./line_share N EVICT ROUNDS */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { OWN_WRITE, SHARED_WRITE, COLD_WRITE, OWN_READ, OTHER_READ, ALL_READ, SCENARIOS };
static const char *const NAMES[SCENARIOS] = {"own-write", "shared-write", "cold-write", "own-read", "other-read",
                                             "all-read"};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float sum(const float *x, long a, long b)
{
    float s = 0;
    #pragma omp simd reduction(+:s)
    for (long i = a; i < b; i++) s += x[i];
    return s;
}

static void fill(float *x, long a, long b, float v)
{
    for (long i = a; i < b; i++) x[i] = v + (float)(i & 7);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: line_share N EVICT ROUNDS\n");
        return 2;
    }
    const long n = atol(argv[1]), evict = atol(argv[2]);
    const int rounds = atoi(argv[3]), T = omp_get_max_threads();
    float *x = aligned_alloc(64, ((size_t)n * 4 + 63) / 64 * 64);
    float *e = aligned_alloc(64, ((size_t)evict * 4 + 63) / 64 * 64);
    double *secs = calloc((size_t)SCENARIOS * rounds * T, sizeof(double));
    if (!x || !e || !secs || n < T || rounds < 1) return 2;
    memset(x, 0, (size_t)n * 4);
    memset(e, 0, (size_t)evict * 4);
    volatile float sink = 0;
    for (int r = 0; r < rounds; r++)
        for (int sc = 0; sc < SCENARIOS; sc++) {
            #pragma omp parallel
            {
                const int t = omp_get_thread_num();
                const long a = n * t / T, b = n * (t + 1) / T;
                const long oa = n * ((t + 1) % T) / T, ob = n * ((t + 1) % T + 1) / T;
                float s = 0;
                if (sc == SHARED_WRITE) s = sum(x, 0, n);
                else if (sc == COLD_WRITE) s = sum(e, evict * t / T, evict * (t + 1) / T);
                else fill(x, a, b, (float)r);
                #pragma omp barrier
                const double t0 = now();
                if (sc <= COLD_WRITE) fill(x, a, b, (float)sc);
                else if (sc == OWN_READ) s += sum(x, a, b);
                else if (sc == OTHER_READ) s += sum(x, oa, ob);
                else s += sum(x, 0, n);
                secs[((size_t)sc * rounds + r) * T + t] = now() - t0;
                #pragma omp atomic
                sink += s;
                #pragma omp barrier
            }
        }
    for (int sc = 0; sc < SCENARIOS; sc++) {
        const long bytes = sc == ALL_READ ? n * 4 : n / T * 4;
        printf("%s %ld", NAMES[sc], bytes);
        for (int r = 0; r < rounds; r++) {
            double m = 0;
            for (int t = 0; t < T; t++)
                if (secs[((size_t)sc * rounds + r) * T + t] > m) m = secs[((size_t)sc * rounds + r) * T + t];
            printf(" %.9f", m);
        }
        printf("\n");
    }
    free(secs);
    free(e);
    free(x);
    return 0;
}
