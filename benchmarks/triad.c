/* STREAM-style triad a[i] = b[i] + s * c[i] (McCalpin's STREAM kernel, float32).
 *
 * Usage: triad N REPEATS THREADS  -> prints one line per repeat: seconds of one triad pass.
 * Built with -DTRIAD_LIB -shared it is a library exporting sf_triad() instead (and sf_read(), a
 * read-only pass).
 * Bytes moved per pass, by STREAM's convention: 3 * N * sizeof(float) (reads of b and c, the
 * write of a; write-allocate traffic is not counted -- the cost model does not count it either).
 * Compiled with the same flags as the emitted kernels, so both sides see the same compiler.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* One triad pass, for callers that time it themselves (the benchmark interleaves it with the
 * kernels it compares, so both see the same machine load). */
void sf_triad(float *restrict a, const float *restrict b, const float *restrict c, long n, float s) {
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}

/* A read-only pass: the sum of b, n floats (the access pattern of a matrix-vector product's
 * weights: one stream read, nothing written; n * sizeof(float) bytes per pass). 32 partial sums
 * per thread, so the loop vectorises without reassociation flags. */
float sf_read(const float *restrict b, long n) {
    float total = 0;
    #pragma omp parallel reduction(+:total)
    {
        float acc[32] = {0};
        #pragma omp for schedule(static)
        for (long i = 0; i < n / 32; i++)
            for (int l = 0; l < 32; l++) acc[l] += b[i * 32 + l];
        for (int l = 0; l < 32; l++) total += acc[l];
    }
    for (long i = n / 32 * 32; i < n; i++) total += b[i];
    return total;
}

#ifndef TRIAD_LIB
int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: triad N REPEATS THREADS\n"); return 2; }
    long n = atol(argv[1]);
    int repeats = atoi(argv[2]);
#ifdef _OPENMP
    omp_set_num_threads(atoi(argv[3]));
#endif
    float *a = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    float *b = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    float *c = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!a || !b || !c) { fprintf(stderr, "out of memory\n"); return 1; }
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) { a[i] = 0.0f; b[i] = 1.0f; c[i] = 2.0f; }   /* first touch */
    const float s = 3.0f;
    double check = 0;
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        #pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        double t1 = now();
        printf("%.9f\n", t1 - t0);
        check += a[(r * 7919L) % n];
    }
    fprintf(stderr, "check %g\n", check);   /* keeps the stores observable */
    free(a); free(b); free(c);
    return 0;
}
#endif
