/* mv.h: a source file compiled once per instruction set, its public functions chosen at run
 * time (cpu.h). For the files whose speed comes from the compiler's own vectorisation (omp simd,
 * FMA where __FMA__ is defined) rather than from hand-written kernels: src/math/metrics.c,
 * normalize.c, sensitivity.c and readings.c.
 *
 * CMake (AL_MV_SOURCES) compiles such a file three times on x86-64 when AL_NATIVE is off:
 *   -DAL_MV_DISPATCH               the baseline copy (f_base) and the dispatching f
 *   -DAL_MV_ISA=avx2   -mavx2 -mfma                       f_avx2
 *   -DAL_MV_ISA=avx512 -mavx512f -mavx512dq -mavx512vl -mavx2 -mfma   f_avx512
 * In the file: define each public function as AL_MV(f), declare the copies with
 * AL_MV_FOR_EACH(PROTOS) (PROTOS(g) declaring g(f) for each f), and under AL_MV_DISPATCH
 * define f to call AL_MV_PICK(f). Built any other way (native, fuzzing, another CPU) AL_MV(f)
 * is f and nothing else happens. */
#ifndef AL_MV_H
#define AL_MV_H

#include "cpu.h"

#define AL_MV_CAT2(a, b) a##_##b
#define AL_MV_CAT(a, b)  AL_MV_CAT2(a, b)
#define AL_MV_BASE(f)    f##_base
#define AL_MV_AVX2(f)    f##_avx2
#define AL_MV_AVX512(f)  f##_avx512
#if defined(AL_MV_ISA)
#define AL_MV(f) AL_MV_CAT(f, AL_MV_ISA)
#elif defined(AL_MV_DISPATCH)
#define AL_MV(f) f##_base
#else
#define AL_MV(f) f
#endif
#define AL_MV_FOR_EACH(PROTOS) PROTOS(AL_MV_BASE) PROTOS(AL_MV_AVX2) PROTOS(AL_MV_AVX512)
/* the copy of f for the level in use */
#define AL_MV_PICK(f)                                                                              \
    (al__cpu_level() == AL__CPU_AVX512 ? f##_avx512                                                \
     : al__cpu_level() == AL__CPU_AVX2 ? f##_avx2                                                  \
                                       : f##_base)

#endif
