"""One thread team per run: the kernels of a multi-threaded program run inside one OpenMP
parallel region that ``sf_run`` opens (:func:`solverfuse.emit.program.render`), instead of one
region per parallel loop.

Why: with ``OMP_WAIT_POLICY=passive`` (how the benchmarks run, ONNX Runtime not spinning either)
every ``#pragma omp parallel`` wakes a sleeping worker through a futex and puts it back to sleep at
the end -- 16-22 us per region measured on the benchmark host, 47 regions per SqueezeNet run (3-4%
of its 2-thread time, and the reason it got slower at 2 threads than at 1). In one region the
threads meet at :data:`SYNC`'s ``sf_sync``, a barrier that spins (then sleeps) while the run is
in progress; between runs the workers sleep as before.

A kernel body fit for this (:func:`team_body`) is rewritten for every thread of the team to run
it: each top-level ``#pragma omp parallel for`` loop becomes an orphaned ``#pragma omp for
nowait`` followed by ``sf_sync(0)``; top-level ``const`` declarations and comments are run by
every thread (each computes the same value); every other run of top-level statements (a copy, a
zero fill, a serial loop nest, a row's statistics) runs on thread 0 between two barriers. A body
whose serial code declares a local that later code reads (it would exist on thread 0 only),
returns, or holds a parallel loop below its top level is left as it was, and the program runs that
kernel outside the team, as before.

>>> body = ["    /* scratch */", "    sf_conv_copy(s1, b0, 3);", "    #pragma omp parallel for schedule(static) num_threads(2)",
...         "    for (long i = 0; i < 8; i++) {", "        b1[i] = s1[i];", "    }"]
>>> print("\\n".join(team_body(body)))
    /* scratch */
    if (SF_TID() == 0) {
    sf_conv_copy(s1, b0, 3);
    }
    (void)sf_sync(0);
    #pragma omp for schedule(static) nowait
    for (long i = 0; i < 8; i++) {
        b1[i] = s1[i];
    }
>>> team_body(["    float acc = 0;", "    #pragma omp parallel for schedule(static) num_threads(2)",
...            "    for (long i = 0; i < 8; i++) {", "        b1[i] = acc;", "    }"]) is None
True
"""
from __future__ import annotations

import re
from typing import Optional

#: C text of the team's barrier: ``sf_sync(flag)`` waits for every thread of the current team and
#: returns whether any of them passed a nonzero ``flag`` (so all threads leave the run together on
#: an error). Spins with a pause instruction for a while, then sleeps on a futex (a loaded machine
#: may have descheduled the thread it waits for, or thread 0 runs a long serial kernel; a spinning
#: wait would hold the core that thread needs). One instance per translation unit: every thread of a
#: team calls the same barriers in the same order, each in the unit of the code that calls it.
#: Without OpenMP (a sanitizer build) the team is the calling thread alone.
SYNC = r"""
#ifdef _OPENMP
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#define SF_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define SF_PAUSE() __asm__ __volatile__("yield")
#else
#define SF_PAUSE() ((void)0)
#endif
/* A waiting thread spins with a pause instruction up to SF_SPINS times (~29 ns a pause on the
   benchmark host: ~120 us) before it sleeps on a futex. Every 256 pauses (~7 us) it yields its
   core: when that took over SF_YIELD_NS (another thread ran there) or the pauses took over
   SF_PREEMPTED_NS (it was preempted), other jobs want the cores, and it sleeps at once; for the
   next SF_LOADED_NS every wait of the process spins SF_SPINS / 64 times only, as does a team
   larger than the processors it may run on. A waiting thread that spins on a loaded machine holds
   a core that the thread it waits for (or another job) needs, where one asleep is woken first; on
   an idle machine sleeping pays a futex wake-up (~36 us on the benchmark host). Paired, 2 threads
   (benchmarks/barrier_load.py): against the earlier bound that halved after every wait ended in
   sleep (it fell to ~2 us after a few long waits -- a kernel's uneven last tile, a serial tail on
   thread 0 -- and then every barrier slept), 0.85-0.92 of the time idle, 0.73-1.02 with one or two
   busy processes beside the run, where a fixed spin without the yields took 1.19-2.24 of it
   (SqueezeNet, Inception v1/v2, ResNet-50; results/omp.md). */
#define SF_SPINS 4096
#define SF_PREEMPTED_NS 100000L
#define SF_YIELD_NS 200000L
#define SF_LOADED_NS 100000000L
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#if defined(__linux__) && defined(SYS_futex)
/* declared here: the prelude's _POSIX_C_SOURCE hides it in <unistd.h>. 128, 129: the kernel's
   FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE (its ABI; <linux/futex.h> is not always installed) */
extern long syscall(long number, ...);
static void sf_sleep(int *p, int v) { syscall(SYS_futex, p, 128, v, (void *)0, (void *)0, 0); }
static void sf_wake(int *p) { syscall(SYS_futex, p, 129, 0x7fffffff, (void *)0, (void *)0, 0); }
#else
static void sf_sleep(int *p, int v) { (void)p; (void)v; sched_yield(); }
static void sf_wake(int *p) { (void)p; }
#endif
static struct { int count SF_ALIGN64; int gen SF_ALIGN64; int sleepers; int flag[2] SF_ALIGN64; int procs; long loaded_until; } sf_team;
static long sf_clock_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long)t.tv_sec * 1000000000L + t.tv_nsec;
}
static SF_UNUSED int sf_sync(int flag)
{
    const int nt = omp_get_num_threads();
    if (nt < 2) return flag != 0;
    const int gen = __atomic_load_n(&sf_team.gen, __ATOMIC_ACQUIRE);
    if (flag) __atomic_fetch_or(&sf_team.flag[gen & 1], 1, __ATOMIC_RELAXED);
    if (__atomic_add_fetch(&sf_team.count, 1, __ATOMIC_ACQ_REL) == nt) {
        /* the last to arrive opens the next phase; nobody uses the other flag until then */
        __atomic_store_n(&sf_team.count, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&sf_team.flag[(gen + 1) & 1], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&sf_team.gen, gen + 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&sf_team.sleepers, __ATOMIC_SEQ_CST)) sf_wake(&sf_team.gen);
    } else {
        /* omp_get_num_procs() asks the kernel for the affinity mask: once per process */
        int procs = __atomic_load_n(&sf_team.procs, __ATOMIC_RELAXED);
        if (!procs) __atomic_store_n(&sf_team.procs, procs = omp_get_num_procs(), __ATOMIC_RELAXED);
        long last = sf_clock_ns();
        const int loaded = last < __atomic_load_n(&sf_team.loaded_until, __ATOMIC_RELAXED);
        const int limit = nt <= procs && !loaded ? SF_SPINS : SF_SPINS / 64;
        for (int spin = 0; spin < limit && __atomic_load_n(&sf_team.gen, __ATOMIC_ACQUIRE) == gen; spin++) {
            SF_PAUSE();
            if ((spin & 255) == 255) {
                /* preempted, or the core wanted by another thread: see SF_SPINS */
                const long before = sf_clock_ns();
                sched_yield();
                const long now = sf_clock_ns();
                if (before - last > SF_PREEMPTED_NS || now - before > SF_YIELD_NS) {
                    __atomic_store_n(&sf_team.loaded_until, now + SF_LOADED_NS, __ATOMIC_RELAXED);
                    break;
                }
                last = now;
            }
        }
        if (__atomic_load_n(&sf_team.gen, __ATOMIC_ACQUIRE) == gen) {
            /* a long wait (the other thread descheduled, or running a serial kernel): sleep */
            __atomic_add_fetch(&sf_team.sleepers, 1, __ATOMIC_SEQ_CST);
            while (__atomic_load_n(&sf_team.gen, __ATOMIC_SEQ_CST) == gen) sf_sleep(&sf_team.gen, gen);
            __atomic_sub_fetch(&sf_team.sleepers, 1, __ATOMIC_RELAXED);
        }
    }
    return __atomic_load_n(&sf_team.flag[gen & 1], __ATOMIC_RELAXED);
}
#else
static SF_UNUSED int sf_sync(int flag) { return flag != 0; }
#endif
"""

_PARALLEL_FOR = re.compile(r"^    #pragma omp parallel for (.*?)\s*num_threads\(\d+\)\s*$")
# run by every thread: comments, const scalars and tables, const pointers to rows of an arena slot
# (each thread computes the same value)
_REPLICATED = re.compile(r"^    (/\*.*\*/|(static )?const [^=]+=[^;]*;|(SF_UNUSED )?const [^=]+=[^;]*;"
                         r"|\w+ \(\*const \w+\)(\[\d+\])+ = [^;]*;)$")
_OPENS = re.compile(r"^    (for|if) \(.*\) \{$|^    \{$")
# a name declared by a top-level statement of a serial run (it must not be used after the run)
_DECLARED = re.compile(r"(?:^|;)\s*(?:const\s+)?(?:float|double|int|long|unsigned|short|char|u?int\d+_t|_Bool)"
                       r"\s+(?:SF_UNUSED\s+)?\**\s*(\w+)")
_SYNC = "    (void)sf_sync(0);"


def _block_end(lines: list[str], i: int) -> int:
    """Index after the top-level block opened at ``lines[i]`` (and its ``else`` parts)."""
    j = i + 1
    while True:
        while j < len(lines) and lines[j] != "    }":
            j += 1
        j += 1
        if j < len(lines) and lines[j].startswith("    else"):
            j += 1
            continue
        return j


def team_body(lines: list[str]) -> Optional[list[str]]:
    """A kernel body (its lines at depth 1 and below) rewritten for every thread of a team to
    run it (see the module docstring), or None when it does not fit: a parallel loop not at its
    top level, a ``return`` in serial code, a local of serial code used after it."""
    out: list[str] = []
    serial: list[str] = []
    declared: list[str] = []
    read_since_sync = False   # a replicated line since the last barrier may read what thread 0 writes next
    later_checks: list[tuple[int, list[str]]] = []

    def flush(at: int):
        nonlocal read_since_sync
        if serial:
            if read_since_sync:
                out.append(_SYNC)
            out.extend(["    if (SF_TID() == 0) {"] + serial + ["    }", _SYNC])
            later_checks.append((at, list(declared)))
            serial.clear()
            declared.clear()
            read_since_sync = False
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = _PARALLEL_FOR.match(ln)
        if m:
            if i + 1 >= len(lines) or not _OPENS.match(lines[i + 1]) or "private" in m.group(1) \
                    or "reduction" in m.group(1):
                return None  # (a data-sharing clause would mean another thing on an orphaned loop)
            end = _block_end(lines, i + 1)
            if any("#pragma omp parallel" in x for x in lines[i + 1:end]):
                return None
            flush(i)
            out.append(f"    #pragma omp for {m.group(1)} nowait")
            out.extend(lines[i + 1:end])
            out.append(_SYNC)
            read_since_sync = False
            i = end
            continue
        if _REPLICATED.match(ln) and not (serial and any(re.search(rf"\b{n}\b", ln) for n in declared)):
            if ln.startswith("    /*") and serial:
                serial.append(ln)
            else:
                flush(i)
                out.append(ln)
                read_since_sync = read_since_sync or (not ln.startswith(("    /*", "    static ")) and ("[" in ln or "(" in ln))
            i += 1
            continue
        if ln.startswith("    #pragma omp simd") and i + 1 < len(lines) and _OPENS.match(lines[i + 1]):
            end = _block_end(lines, i + 1)
        elif _OPENS.match(ln):
            end = _block_end(lines, i)
        elif ln.startswith("    ") and not ln.startswith("     ") and ln.endswith(";"):
            declared += _DECLARED.findall(ln[4:])
            end = i + 1
        else:
            return None
        part = lines[i:end]
        if any(re.search(r"\breturn\b", x) or ("#pragma omp" in x and "simd" not in x and "atomic" not in x)
               for x in part):
            return None
        serial.extend(part)
        i = end
    flush(len(lines))
    for at, names in later_checks:
        if names and any(re.search(rf"\b{n}\b", x) for x in lines[at:] for n in names):
            return None
    if out and out[-1] == _SYNC:
        out.pop()  # the program's driver meets at a barrier after every kernel
    return out
