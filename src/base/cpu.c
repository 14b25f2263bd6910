/* cpu.c: run-time choice of the kernels' instruction set (see cpu.h). */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

static int cpu_level = -1; /* -1: not chosen yet; read and written with atomics */

al__cpu_isa al__cpu_detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        return AL__CPU_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return AL__CPU_AVX2;
#endif
    return AL__CPU_SCALAR;
}

const char *al__cpu_name(al__cpu_isa isa) {
    static const char *names[] = {"scalar", "avx2", "avx512"};
    return (unsigned)isa < 3 ? names[isa] : "?";
}

/* ATTNLIM_CPU as a level: 0 and *isa set, or -1 (not a name) */
static int env_level(const char *v, al__cpu_isa *isa) {
    for (int i = 0; i < 3; i++)
        if (strcmp(v, al__cpu_name((al__cpu_isa)i)) == 0) {
            *isa = (al__cpu_isa)i;
            return 0;
        }
    return -1;
}

al__cpu_isa al__cpu_force(al__cpu_isa isa) {
    if ((int)isa < 0) { /* back to the choice of ATTNLIM_CPU on the next al__cpu_level() */
        __atomic_store_n(&cpu_level, -1, __ATOMIC_RELEASE);
        return al__cpu_level();
    }
    al__cpu_isa have = al__cpu_detect();
    if (isa > have) isa = have;
    __atomic_store_n(&cpu_level, (int)isa, __ATOMIC_RELEASE);
    return isa;
}

al__cpu_isa al__cpu_level(void) {
    int l = __atomic_load_n(&cpu_level, __ATOMIC_ACQUIRE);
    if (l >= 0) return (al__cpu_isa)l;
    al__cpu_isa have = al__cpu_detect(), want = have;
    const char *v = getenv("ATTNLIM_CPU");
    if (v && *v && env_level(v, &want) == 0 && want < have) have = want;
    __atomic_store_n(&cpu_level, (int)have, __ATOMIC_RELEASE);
    return have;
}

int al__cpu_check_env(al_error *err) {
    const char *v = getenv("ATTNLIM_CPU");
    if (!v || !*v) return 0;
    al__cpu_isa want, have = al__cpu_detect();
    if (env_level(v, &want) != 0)
        return al__err(err, AL_E_INVALID,
                       "ATTNLIM_CPU='%.40s' is not one of scalar, avx2, avx512 (this CPU: %s)", v,
                       al__cpu_name(have));
    if (want > have)
        return al__err(err, AL_E_INVALID, "ATTNLIM_CPU=%s: this CPU supports only up to %s", v,
                       al__cpu_name(have));
    return 0;
}
