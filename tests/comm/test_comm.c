/*
 * test_comm.c - the communication layer (runtime/comm/comm.h) over every
 * transport of runtime/comm/transport.h, as ggml's test-backend-ops runs
 * every op on every backend: each table's required entries are there, then
 * the same cases run on a job of each transport this build has.
 *
 *   test_comm              every table; then the job of one process
 *                          (single): rank 0 of 1, argument checks, no-op
 *                          collectives, no peers; jobs of 2, 3 and 4
 *                          threads (local): the job and group cases below,
 *                          and a rank that fails ending the others' waits
 *                          at once; MPI needs a launcher (the next line)
 *   test_comm --job        run by mpirun with 2 or more ranks (comm_mpi.sh),
 *                          MPI: tensors around a ring, chunk-sized and empty
 *                          messages, a size mismatch, tags kept apart,
 *                          sum and broadcast identical on every rank,
 *                          a receive that times out naming its peer;
 *                          groups: members ordered by key, sums formed in
 *                          member order (bitwise), two groups summing at
 *                          once from two threads
 * --job exits 77 (skip) in a build without MPI.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/comm.h"
#include "runtime/comm/transport.h"
#include "runtime/core/device.h"
#include "tests/check.h"

static void test_single(void)
{
    pp_error err;
    pp_comm *c = NULL;
    CHECK_OK(pp_comm_init(NULL, NULL, &c, &err), &err);
    if (!c) return;
    CHECK(pp_comm_rank(c) == 0);
    CHECK(pp_comm_size(c) == 1);
    CHECK(pp_comm_thread_safe(c));
    float x[3] = {1.5f, -2.0f, 3.25f};
    CHECK_OK(pp_comm_allreduce_sum_f32(c, x, 3, &err), &err);
    CHECK(x[0] == 1.5f && x[1] == -2.0f && x[2] == 3.25f);
    CHECK_OK(pp_comm_broadcast(c, 0, x, sizeof x, &err), &err);
    CHECK_OK(pp_comm_barrier(c, &err), &err);
    CHECK(pp_comm_send(c, 1, 0, x, sizeof x, &err) == PP_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "rank 1 does not exist (the job has 1 process)"), "%s", err.msg);
    CHECK(pp_comm_recv(c, 0, 0, x, sizeof x, &err) == PP_ERR_INVALID);
    CHECK_MSG(strstr(err.msg, "to itself"), "%s", err.msg);
    CHECK(pp_comm_send(c, 0, -1, x, sizeof x, &err) == PP_ERR_INVALID);
    CHECK(pp_comm_broadcast(c, 2, x, sizeof x, &err) == PP_ERR_INVALID);
    CHECK(pp_comm_allreduce_sum_f32(c, NULL, 3, &err) == PP_ERR_INVALID);
    CHECK(pp_comm_set_timeout(c, -1, &err) == PP_ERR_INVALID);
    CHECK_OK(pp_comm_set_timeout(c, 0, &err), &err);
    CHECK(pp_comm_rank(NULL) == 0 && pp_comm_size(NULL) == 1);
    pp_comm_group *g = NULL;
    CHECK_OK(pp_comm_group_new(c, true, 5, &g, &err), &err);
    CHECK(g && pp_comm_group_size(g) == 1 && pp_comm_group_rank(g) == 0 &&
          pp_comm_group_job_rank(g, 0) == 0 && pp_comm_group_job_rank(g, 1) == -1);
    CHECK_OK(pp_comm_group_allreduce_sum_f32(g, x, 3, &err), &err);
    CHECK(x[0] == 1.5f && x[1] == -2.0f && x[2] == 3.25f);
    CHECK(pp_comm_group_allreduce_sum_f32(NULL, x, 3, &err) == PP_ERR_INVALID);
    pp_comm_group_free(g);
    pp_comm_group *none = (pp_comm_group *)&err;
    CHECK_OK(pp_comm_group_new(c, false, 0, &none, &err), &err);
    CHECK(none == NULL);
    pp_comm_free(c);
    pp_comm_free(NULL);
}

/* A value every rank can compute for element i of rank r's contribution. */
static float value(int r, size_t i) { return (float)((r + 1) * 0.1) + (float)(i % 97) * 1e-3f; }

static void test_job(pp_comm *c)
{
    pp_error err;
    int rank = pp_comm_rank(c), size = pp_comm_size(c);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    CHECK(size >= 2);
    CHECK(pp_comm_thread_safe(c));

    /* 1. A CPU tensor around the ring (send first on even ranks). */
    pp_registry *reg = NULL;
    pp_device_ctx *cpu = NULL;
    CHECK_OK(pp_registry_new(&reg, &err), &err);
    pp_device_id id = {PP_DEVICE_CPU, 0};
    CHECK_OK(pp_registry_get(reg, id, &cpu, &err), &err);
    int64_t shape[4] = {2, 3, 4, 5};
    pp_tensor a, b;
    CHECK_OK(pp_tensor_alloc(&a, cpu, PP_F32, 4, shape, &err), &err);
    CHECK_OK(pp_tensor_alloc(&b, cpu, PP_F32, 4, shape, &err), &err);
    float *pa = a.data, *pb = b.data;
    for (int i = 0; i < 120; i++) pa[i] = value(rank, (size_t)i);
    if (rank % 2 == 0) {
        CHECK_OK(pp_comm_send_tensor(c, next, 1, &a, &err), &err);
        CHECK_OK(pp_comm_recv_tensor(c, prev, 1, &b, &err), &err);
    } else {
        CHECK_OK(pp_comm_recv_tensor(c, prev, 1, &b, &err), &err);
        CHECK_OK(pp_comm_send_tensor(c, next, 1, &a, &err), &err);
    }
    int bad = 0;
    for (int i = 0; i < 120; i++) bad += pb[i] != value(prev, (size_t)i);
    CHECK_MSG(bad == 0, "rank %d: %d elements differ from rank %d's", rank, bad, prev);

    /* 2. Tags keep messages apart: rank 0 sends tag 3 then tag 2, rank 1
     * receives tag 2 first. Then an empty message and a size mismatch. */
    if (rank == 0) {
        int v3 = 33, v2 = 22;
        CHECK_OK(pp_comm_send(c, 1, 3, &v3, sizeof v3, &err), &err);
        CHECK_OK(pp_comm_send(c, 1, 2, &v2, sizeof v2, &err), &err);
        CHECK_OK(pp_comm_send(c, 1, 4, NULL, 0, &err), &err);
        double d = 1.0;
        CHECK_OK(pp_comm_send(c, 1, 5, &d, sizeof d, &err), &err);
    } else if (rank == 1) {
        int v2 = 0, v3 = 0;
        CHECK_OK(pp_comm_recv(c, 0, 2, &v2, sizeof v2, &err), &err);
        CHECK_OK(pp_comm_recv(c, 0, 3, &v3, sizeof v3, &err), &err);
        CHECK(v2 == 22 && v3 == 33);
        CHECK_OK(pp_comm_recv(c, 0, 4, NULL, 0, &err), &err);
        char small[16];
        pp_status s = pp_comm_recv(c, 0, 5, small, 4, &err);
        CHECK_MSG(s == PP_ERR_BACKEND, "size mismatch -> %s", pp_status_name(s));
        CHECK_MSG(strstr(err.msg, "rank 1:") && strstr(err.msg, "rank 0"), "%s", err.msg);
    }
    CHECK_OK(pp_comm_barrier(c, &err), &err);

    /* 3. The sum: one element per rank-dependent value, larger than one
     * reduction segment, identical on every rank. */
    size_t n = 100003;
    float *x = malloc(n * sizeof *x);
    double *want = malloc(n * sizeof *want);
    CHECK(x && want);
    if (!x || !want) return;
    for (size_t i = 0; i < n; i++) {
        x[i] = value(rank, i);
        want[i] = 0;
        for (int r = 0; r < size; r++) want[i] += value(r, i);
    }
    CHECK_OK(pp_comm_allreduce_sum_f32(c, x, n, &err), &err);
    bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += fabs(x[i] - want[i]) > 1e-6 * (fabs(want[i]) + 1) * size;
    CHECK_MSG(bad == 0, "rank %d: %d sums wrong", rank, bad);
    /* Same bits everywhere: rank 0 broadcasts its result, every rank compares. */
    float *ref = malloc(n * sizeof *ref);
    CHECK(ref);
    if (!ref) return;
    memcpy(ref, x, n * sizeof *x);
    CHECK_OK(pp_comm_broadcast(c, 0, ref, n * sizeof *ref, &err), &err);
    CHECK_MSG(memcmp(ref, x, n * sizeof *x) == 0, "rank %d: sum differs from rank 0's bits",
              rank);
    free(ref);
    free(want);
    free(x);

    /* 4. A receive nobody answers times out naming the peer. */
    CHECK_OK(pp_comm_set_timeout(c, 0.3, &err), &err);
    if (rank == size - 1) {
        int v = 0;
        pp_status s = pp_comm_recv(c, 0, 9, &v, sizeof v, &err);
        CHECK_MSG(s == PP_ERR_BACKEND, "unanswered receive -> %s", pp_status_name(s));
        CHECK_MSG(strstr(err.msg, "receive from rank 0") && strstr(err.msg, "within 0.3 s"),
                  "%s", err.msg);
    }
    CHECK_OK(pp_comm_set_timeout(c, PP_COMM_TIMEOUT_DEFAULT_S, &err), &err);
    CHECK_OK(pp_comm_barrier(c, &err), &err);
    pp_tensor_free(&a);
    pp_tensor_free(&b);
    pp_registry_free(reg);
}

/* Values whose float sum depends on the order of the terms. */
static float term(int r, size_t i) { return (r % 2 ? 3.0e7f : 1.0f) * (1.0f + (float)(i % 13) * 0.37f) + (float)r * 0.1f; }

typedef struct group_run {
    pp_comm_group *g;
    size_t n;
    int rounds;
    int bad;        /* elements not equal to the sum in member order */
    pp_status s;
    pp_error err;
} group_run;

/* Sums term(member's rank) over g's members `rounds` times; each result
 * must equal, bit for bit, the sum formed in member order. */
static void *group_sums(void *arg)
{
    group_run *gr = arg;
    float *x = malloc(gr->n * sizeof *x);
    gr->s = x ? PP_OK : PP_ERR_OOM;
    for (int k = 0; x && k < gr->rounds && gr->s == PP_OK; k++) {
        int me = pp_comm_group_job_rank(gr->g, pp_comm_group_rank(gr->g));
        for (size_t i = 0; i < gr->n; i++) x[i] = term(me + k, i);
        gr->s = pp_comm_group_allreduce_sum_f32(gr->g, x, gr->n, &gr->err);
        for (size_t i = 0; gr->s == PP_OK && i < gr->n; i++) {
            float want = term(pp_comm_group_job_rank(gr->g, 0) + k, i);
            for (int m = 1; m < pp_comm_group_size(gr->g); m++)
                want += term(pp_comm_group_job_rank(gr->g, m) + k, i);
            gr->bad += memcmp(&want, &x[i], sizeof want) != 0;
        }
    }
    free(x);
    return NULL;
}

/* Even ranks in reverse order, and every rank in order, summing at once. */
static void test_groups(pp_comm *c)
{
    pp_error err;
    int rank = pp_comm_rank(c), size = pp_comm_size(c);
    pp_comm_group *evens = NULL, *all = NULL;
    CHECK_OK(pp_comm_group_new(c, rank % 2 == 0, -rank, &evens, &err), &err);
    CHECK_OK(pp_comm_group_new(c, true, rank, &all, &err), &err);
    CHECK(all && pp_comm_group_size(all) == size && pp_comm_group_rank(all) == rank);
    CHECK((evens != NULL) == (rank % 2 == 0));
    if (evens) {
        int n_even = (size + 1) / 2, top = 2 * (n_even - 1);
        CHECK(pp_comm_group_size(evens) == n_even);
        CHECK_MSG(pp_comm_group_job_rank(evens, 0) == top &&
                  pp_comm_group_rank(evens) == (top - rank) / 2,
                  "rank %d: members ordered by key: first %d, mine %d", rank,
                  pp_comm_group_job_rank(evens, 0), pp_comm_group_rank(evens));
    }
    if (!all) return;
    int word = rank == size - 1 ? 4242 : -1;
    CHECK_OK(pp_comm_group_broadcast(all, size - 1, &word, sizeof word, &err), &err);
    CHECK_MSG(word == 4242, "rank %d: group broadcast gave %d", rank, word);
    CHECK(pp_comm_group_broadcast(all, size, &word, sizeof word, &err) == PP_ERR_INVALID);
    group_run a = {.g = evens, .n = 4099, .rounds = 20}, b = {.g = all, .n = 1031, .rounds = 20};
    pthread_t ta;
    bool threaded = evens && pthread_create(&ta, NULL, group_sums, &a) == 0;
    CHECK(threaded || !evens);
    group_sums(&b);
    if (threaded) pthread_join(ta, NULL);
    CHECK_OK(b.s, &b.err);
    CHECK_MSG(b.bad == 0, "rank %d: %d sums of all ranks not in member order", rank, b.bad);
    if (evens) {
        CHECK_OK(a.s, &a.err);
        CHECK_MSG(a.bad == 0, "rank %d: %d sums of even ranks not in member order", rank, a.bad);
    }
    pp_comm_group_free(evens);
    pp_comm_group_free(all);
    CHECK_OK(pp_comm_barrier(c, &err), &err);
}

typedef struct thread_rank {
    pp_comm *c;
} thread_rank;

static void *run_thread_rank(void *arg)
{
    thread_rank *t = arg;
    test_job(t->c);
    test_groups(t->c);
    return NULL;
}

/* The job and group checks with ranks that are threads. */
static void test_threads(int size)
{
    pp_error err;
    pp_comm *comms[4] = {0};
    CHECK_OK(pp_comm_local_new(size, comms, &err), &err);
    if (!comms[0]) return;
    CHECK(pp_comm_is_local(comms[0]) && pp_comm_size(comms[size - 1]) == size &&
          pp_comm_rank(comms[size - 1]) == size - 1);
    thread_rank t[4];
    pthread_t th[4];
    for (int r = 0; r < size; r++) {
        t[r].c = comms[r];
        CHECK(pthread_create(&th[r], NULL, run_thread_rank, &t[r]) == 0);
    }
    for (int r = 0; r < size; r++) pthread_join(th[r], NULL);
    int rank = -1;
    char msg[64];
    CHECK(!pp_comm_first_failure(comms[0], &rank, msg, sizeof msg));
    for (int r = 0; r < size; r++) pp_comm_free(comms[r]);
    CHECK(pp_comm_local_new(0, comms, &err) == PP_ERR_INVALID);
}

static void *fail_soon(void *arg)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    pp_comm_mark_failed(arg, "out of memory in stage 1");
    return NULL;
}

/* Rank 1 fails while rank 0 waits for it (timeout 60 s): the wait ends at
 * once naming rank 1 and its reason, and so do later waits. */
static void test_thread_failure(void)
{
    pp_error err;
    pp_comm *comms[2] = {0};
    CHECK_OK(pp_comm_local_new(2, comms, &err), &err);
    if (!comms[0]) return;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fail_soon, comms[1]) == 0);
    float x[4] = {0};
    pp_status s = pp_comm_allreduce_sum_f32(comms[0], x, 4, &err);
    pthread_join(th, NULL);
    CHECK_MSG(s == PP_ERR_BACKEND && strstr(err.msg, "rank 1 failed: out of memory in stage 1"),
              "%s: %s", pp_status_name(s), err.msg);
    CHECK(pp_comm_recv(comms[0], 1, 3, x, sizeof x, &err) == PP_ERR_BACKEND);
    int rank = -1;
    char msg[64];
    CHECK(pp_comm_first_failure(comms[0], &rank, msg, sizeof msg) && rank == 1 &&
          strcmp(msg, "out of memory in stage 1") == 0);
    pp_comm_mark_failed(comms[0], "later");
    CHECK(pp_comm_first_failure(comms[1], &rank, msg, sizeof msg) && rank == 1);
    pp_comm_free(comms[1]);
    pp_comm_free(comms[0]);
}

/* A table's required entries, and init with launched. */
static void check_table(const pp_comm_ops *t)
{
    CHECK_MSG(t->name && t->send && t->recv && t->allreduce_sum_f32 && t->broadcast &&
              t->barrier && t->group_new && t->group_sum_f32 && t->group_broadcast,
              "transport %s: a required entry is NULL", t->name ? t->name : "(unnamed)");
    CHECK_MSG(!t->launched || t->init, "transport %s: launched without init", t->name);
}

/* The cases on a job of the transport t. */
static void test_transport(const pp_comm_ops *t)
{
    if (t == pp_comm_local_ops()) {
        for (int size = 2; size <= 4; size++) test_threads(size);
        test_thread_failure();
        return;
    }
    /* a transport between processes: the one this process joins */
    pp_error err;
    pp_comm *c = NULL;
    CHECK_OK(pp_comm_init(NULL, NULL, &c, &err), &err);
    if (!c) return;
    const pp_comm_ops *joined = c->ops;
    pp_comm_free(c);
    if (joined != t) {
        printf("    needs a launcher (mpirun): comm_mpi_np2, comm_mpi_np3\n");
        return;
    }
    CHECK(t == pp_comm_single_ops());
    test_single();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        const pp_comm_ops *(*get)(void);
    } transports[] = {{"local", pp_comm_local_ops}, {"mpi", pp_comm_mpi_ops},
                      {"single", pp_comm_single_ops}};
    if (argc > 1 && strcmp(argv[1], "--job") == 0) {
        if (!pp_comm_built_with_mpi()) {
            fprintf(stderr, "test_comm: built without MPI\n");
            return 77;
        }
        pp_error err;
        pp_comm *c = NULL;
        if (pp_comm_init(&argc, &argv, &c, &err) != PP_OK) {
            fprintf(stderr, "test_comm: %s\n", err.msg);
            return 1;
        }
        char name[32];
        snprintf(name, sizeof name, "comm (rank %d of %d)", pp_comm_rank(c), pp_comm_size(c));
        CHECK_MSG(c->ops == pp_comm_mpi_ops(), "a launched job runs on %s, not mpi",
                  c->ops->name);
        test_job(c);
        test_groups(c);
        int rc = check_summary(name);
        pp_comm_free(c);
        return rc;
    }
    CHECK(pp_comm_built_with_mpi() == (pp_comm_mpi_ops() != NULL));
    for (size_t i = 0; i < sizeof transports / sizeof transports[0]; i++) {
        const pp_comm_ops *t = transports[i].get();
        if (!t) {
            printf("transport %s: not in this build\n", transports[i].name);
            continue;
        }
        CHECK_MSG(strcmp(t->name, transports[i].name) == 0, "transport %s named %s",
                  transports[i].name, t->name);
        check_table(t);
        printf("transport %s\n", t->name);
        test_transport(t);
    }
    return check_summary("comm");
}
