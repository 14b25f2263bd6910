/* dist.c: a group of cooperating processes (al_dist): MPI_COMM_WORLD when attnlim was built with
 * MPI (AL_HAVE_MPI, CMake's AL_MPI) and the program was started by an MPI launcher; otherwise
 * this process alone, with the same interface (dist.h), so that reproduce.c and every caller are
 * free of #ifdefs. Only the calling (main) thread speaks MPI, outside OpenMP regions
 * (MPI_THREAD_FUNNELED). The group is carried in the al_dist the caller holds: no globals here
 * (MPI's own process state aside). */
#include "dist.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef AL_HAVE_MPI
#include <mpi.h>
#endif

struct al_dist {
    int rank, size;
    int finalize; /* this group called MPI_Init: al_dist_close calls MPI_Finalize */
    char host[256];
#ifdef AL_HAVE_MPI
    int mpi; /* comm is valid */
    MPI_Comm comm;
#endif
};

int al_dist_has_mpi(void) {
#ifdef AL_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

/* An integer environment variable, or -1 when unset or not a number. */
static long env_long(const char *name) {
    const char *s = getenv(name);
    if (!s || !*s) return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end ? -1 : v;
}

/* Started by an MPI launcher? OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE, Hydra (MPICH) and
 * Slurm's PMI set PMI_SIZE, PMIx launchers PMIX_RANK. */
int al_dist_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}
/* The group size and this process's rank that the launcher announces (-1: it does not say). */
static void launcher_says(long *size, long *rank) {
    *size = env_long("OMPI_COMM_WORLD_SIZE");
    if (*size < 0) *size = env_long("PMI_SIZE");
    *rank = env_long("OMPI_COMM_WORLD_RANK");
    if (*rank < 0) *rank = env_long("PMI_RANK");
    if (*rank < 0) *rank = env_long("PMIX_RANK");
}

int al_dist_rank(const al_dist *d) {
    return d ? d->rank : 0;
}
int al_dist_size(const al_dist *d) {
    return d ? d->size : 1;
}
int al__dist_rank(const al_dist *d) {
    return al_dist_rank(d);
}
int al__dist_size(const al_dist *d) {
    return al_dist_size(d);
}
const char *al__dist_host(const al_dist *d) {
    return d ? d->host : "localhost";
}

#ifdef AL_HAVE_MPI
static int is_mpi(const al_dist *d) {
    return d && d->mpi && d->size > 1;
}

/* An MPI call that failed, as an error naming the call. */
static int mpi_fail(al_error *err, const char *call, int code) {
    char s[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "error %d", code);
    return al__err(err, AL_E_IO, "%s failed: %s", call, s);
}
#endif

int al_dist_open(al_dist **out, al_error *err) {
    *out = NULL;
    al_dist *d = al__calloc(1, sizeof *d, "process group", err);
    if (!d) return AL_E_NOMEM;
    d->size = 1;
    if (gethostname(d->host, sizeof d->host - 1) != 0 || !d->host[0])
        snprintf(d->host, sizeof d->host, "unknown-host");
    long want_size, want_rank;
    launcher_says(&want_size, &want_rank);
    if (!al_dist_launched()) {
        *out = d;
        return 0;
    }
#ifdef AL_HAVE_MPI
    int inited = 0, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS) {
            free(d);
            return mpi_fail(err, "MPI_Init_thread", rc);
        }
        d->finalize = 1;
    }
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &d->comm)) != MPI_SUCCESS) {
        al_dist_close(d);
        return mpi_fail(err, "MPI_Comm_dup", rc);
    }
    d->mpi = 1;
    MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->comm, &d->rank);
    MPI_Comm_size(d->comm, &d->size);
    if (want_size > 1 && d->size != want_size) {
        int sz = d->size;
        al_dist_close(d);
        return al__err(err, AL_E_UNSUPPORTED,
                       "the MPI launcher started %ld processes, but MPI sees a group of %d: the "
                       "launcher (mpirun) is not one of the MPI attnlim was built with",
                       want_size, sz);
    }
    *out = d;
    return 0;
#else
    if (want_size > 1 || want_rank > 0) {
        free(d);
        return al__err(err, AL_E_UNSUPPORTED,
                       "started by an MPI launcher as one of %ld processes (rank %ld), but this "
                       "attnlim was built without MPI: install libopenmpi-dev and openmpi-bin "
                       "(scripts/setup.sh does) and rebuild (CMake finds MPI, or -DAL_MPI=ON)",
                       want_size, want_rank);
    }
    *out = d;
    return 0;
#endif
}

void al_dist_close(al_dist *d) {
    if (!d) return;
#ifdef AL_HAVE_MPI
    if (d->mpi) MPI_Comm_free(&d->comm);
    if (d->finalize) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
    }
#endif
    free(d);
}

int al__dist_agree(al_dist *d, int rc, al_error *err) {
#ifdef AL_HAVE_MPI
    if (!is_mpi(d)) return rc;
    int mine = rc ? d->rank : INT_MAX, first = INT_MAX, m;
    if ((m = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, d->comm)) != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Allreduce (status)", m);
    if (first == INT_MAX) return 0;
    struct {
        int code;
        char msg[sizeof err->msg];
    } what;
    memset(&what, 0, sizeof what);
    if (d->rank == first) {
        what.code = rc;
        const char *msg = err && err->msg[0] ? err->msg : "failed";
        if (first == 0)
            snprintf(what.msg, sizeof what.msg, "%s", msg);
        else
            snprintf(what.msg, sizeof what.msg, "rank %d (%s): %s", first, d->host, msg);
    }
    if ((m = MPI_Bcast(&what, (int)sizeof what, MPI_BYTE, first, d->comm)) != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Bcast (status)", m);
    if (err) {
        err->code = (al_code)what.code;
        memcpy(err->msg, what.msg, sizeof err->msg);
        err->msg[sizeof err->msg - 1] = 0;
    }
    return what.code;
#else
    (void)d;
    (void)err;
    return rc;
#endif
}

int al_dist_agree(al_dist *d, int rc, al_error *err) {
    return al__dist_agree(d, rc, err);
}

int al__dist_bcast(al_dist *d, void *buf, size_t n, al_error *err) {
#ifdef AL_HAVE_MPI
    if (!is_mpi(d)) return 0;
    for (size_t off = 0; off < n;) {
        int c = n - off > (size_t)1 << 30 ? 1 << 30 : (int)(n - off), m;
        if ((m = MPI_Bcast((char *)buf + off, c, MPI_BYTE, 0, d->comm)) != MPI_SUCCESS)
            return mpi_fail(err, "MPI_Bcast", m);
        off += (size_t)c;
    }
    return 0;
#else
    (void)d;
    (void)buf;
    (void)n;
    (void)err;
    return 0;
#endif
}

int al__dist_gather(al_dist *d, const void *mine, size_t n, void *all, al_error *err) {
#ifdef AL_HAVE_MPI
    if (is_mpi(d)) {
        if (n > INT_MAX) return al__err(err, AL_E_INVALID, "MPI_Gather of %zu bytes", n);
        int m = MPI_Gather(mine, (int)n, MPI_BYTE, all, (int)n, MPI_BYTE, 0, d->comm);
        return m == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Gather", m);
    }
#endif
    (void)d;
    (void)err;
    if (all && n) memcpy(all, mine, n);
    return 0;
}

int al__dist_reduce(al_dist *d, double *v, int n, int max, al_error *err) {
#ifdef AL_HAVE_MPI
    if (!is_mpi(d)) return 0;
    int m = MPI_Reduce(d->rank == 0 ? MPI_IN_PLACE : v, v, n, MPI_DOUBLE, max ? MPI_MAX : MPI_SUM,
                       0, d->comm);
    return m == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Reduce", m);
#else
    (void)d;
    (void)v;
    (void)n;
    (void)max;
    (void)err;
    return 0;
#endif
}

/* Every head computed exactly once, by its owner? counts: [size, H] (row r: rank r's done). */
static int check_heads(const al_dist *d, int64_t H, int n_head, const uint8_t *counts,
                       al_error *err) {
    int size = al__dist_size(d);
    for (int64_t h = 0; h < H; h++) {
        int total = 0, own = counts[(size_t)al__dist_owner(d, h) * H + h];
        for (int r = 0; r < size; r++) total += counts[(size_t)r * H + h];
        if (total == 1 && own == 1) continue;
        int layer = (int)(h / n_head), head = (int)(h % n_head);
        if (size == 1)
            return al__err(err, AL_E_INVALID,
                           "layer %d head %d was computed %d time(s); every head must be "
                           "computed exactly once",
                           layer, head, total);
        return al__err(err, AL_E_INVALID,
                       "layer %d head %d was computed %d time(s) over the %d ranks (%d by its "
                       "owner, rank %d); every head must be computed exactly once, by its owner",
                       layer, head, total, size, own, al__dist_owner(d, h));
    }
    return 0;
}

int al__dist_merge_heads(al_dist *d, int64_t H, int n_head, int n_arr, double *const *arr,
                         const int64_t *cols, const uint8_t *done, al_error *err) {
#ifdef AL_HAVE_MPI
    if (is_mpi(d)) {
        int size = d->size, rank = d->rank, rc = 0;
        int64_t W = 0; /* doubles per head, all arrays */
        for (int a = 0; a < n_arr; a++) W += cols[a];
        int64_t most = (H + size - 1) / size; /* rows of the rank that owns the most */
        uint8_t *counts = NULL;
        double *send = NULL, *recv = NULL;
        int *rcount = NULL, *displ = NULL;
        if (H * W > INT_MAX || (int64_t)size * H > INT_MAX) /* counts and displacements: int */
            rc = al__err(err, AL_E_INVALID, "%lld heads x %lld values are too many for MPI",
                         (long long)H, (long long)W);
        if (!rc && !(send = al__malloc(sizeof(double) * (size_t)(most * W + 1), "merge", err)))
            rc = AL_E_NOMEM;
        if (!rc && rank == 0 &&
            (!(counts = al__malloc((size_t)(size * H + 1), "merge", err)) ||
             !(recv = al__malloc(sizeof(double) * (size_t)(H * W + 1), "merge", err)) ||
             !(rcount = al__malloc(sizeof(int) * (size_t)size, "merge", err)) ||
             !(displ = al__malloc(sizeof(int) * (size_t)size, "merge", err))))
            rc = AL_E_NOMEM;
        rc = al__dist_agree(d, rc, err);
        if (!rc) {
            /* rank r's rows: its heads in ascending order, each the rows of every array */
            int64_t k = 0;
            for (int64_t h = rank; h < H; h += size)
                for (int a = 0; a < n_arr; a++) {
                    memcpy(send + k, arr[a] + (size_t)(h * cols[a]),
                           sizeof(double) * (size_t)cols[a]);
                    k += cols[a];
                }
            if (rank == 0)
                for (int r = 0, off = 0; r < size; r++) {
                    int64_t rows = H / size + (r < H % size);
                    rcount[r] = (int)(rows * W);
                    displ[r] = off;
                    off += rcount[r];
                }
            int m = MPI_Gather(done, (int)H, MPI_BYTE, counts, (int)H, MPI_BYTE, 0, d->comm);
            if (m != MPI_SUCCESS) rc = mpi_fail(err, "MPI_Gather (heads done)", m);
            if (!rc && (m = MPI_Gatherv(send, (int)k, MPI_DOUBLE, recv, rcount, displ, MPI_DOUBLE,
                                        0, d->comm)) != MPI_SUCCESS)
                rc = mpi_fail(err, "MPI_Gatherv (per-head arrays)", m);
            if (!rc && rank == 0) {
                rc = check_heads(d, H, n_head, counts, err);
                for (int r = 1; r < size && !rc; r++) {
                    const double *src = recv + displ[r];
                    for (int64_t h = r; h < H; h += size)
                        for (int a = 0; a < n_arr; a++) {
                            memcpy(arr[a] + (size_t)(h * cols[a]), src,
                                   sizeof(double) * (size_t)cols[a]);
                            src += cols[a];
                        }
                }
            }
            rc = al__dist_agree(d, rc, err);
        }
        free(send);
        free(recv);
        free(counts);
        free(rcount);
        free(displ);
        return rc;
    }
#endif
    (void)n_arr;
    (void)arr;
    (void)cols;
    return check_heads(d, H, n_head, done, err);
}
