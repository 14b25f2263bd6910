/* cpu.h: the instruction set the kernels use, chosen at run time (never -march=native).
 *
 * The vector kernels of src/model (ops.c, attention.c) are compiled with per-function target
 * attributes and picked by al__cpu_level(): the best level this CPU supports, or the one
 * ATTNLIM_CPU names (scalar | avx2 | avx512), capped at what the CPU has. */
#ifndef AL_CPU_H
#define AL_CPU_H

#include "internal.h"

typedef enum al__cpu_isa {
    AL__CPU_SCALAR = 0, /* portable C (x86-64 baseline SSE2 as the compiler vectorises it) */
    AL__CPU_AVX2 = 1,   /* AVX2 + FMA */
    AL__CPU_AVX512 = 2, /* AVX-512 F (+ the AVX2 kernels where no 512-bit one exists) */
} al__cpu_isa;

/* What this CPU supports (cpuid, and the OS saving the registers: __builtin_cpu_supports). */
al__cpu_isa al__cpu_detect(void);
/* The level in use: set on first call from ATTNLIM_CPU (an unknown or unsupported value falls
 * back to al__cpu_detect(); the CLI refuses it first with al__cpu_check_env). Thread-safe. */
al__cpu_isa al__cpu_level(void);
/* Forces a level for the tests (capped at al__cpu_detect()); a negative isa goes back to the
 * choice of ATTNLIM_CPU (read again). Returns the level now in use. */
al__cpu_isa al__cpu_force(al__cpu_isa isa);
/* "scalar", "avx2", "avx512" */
const char *al__cpu_name(al__cpu_isa isa);
/* Checks $ATTNLIM_CPU: unset or one of the names above and supported here, else an error saying
 * what this CPU supports. */
int al__cpu_check_env(al_error *err);

#endif
