/*
 * local.c - the transport of a job whose ranks are threads of this process
 * (pp_comm_local_new), for data-parallel replicas that share a process.
 *
 * A message goes into a queue the job's ranks share under one lock; a
 * receive takes the oldest message from its peer with its tag (so messages
 * of one pair and tag arrive in order, as MPI's do) and waits on a condition
 * variable up to the comm's timeout. Short messages are copied and the send
 * returns; long ones are copied once, by the receiver from the sender's
 * buffer, and the send waits for that (MPI's rendezvous: code that works
 * between processes works here).
 *
 * Collectives are built from messages with tags above the user's range, in
 * the orders of the MPI backend: a float sum is formed on rank 0 (member 0 of
 * a group) by adding rank 1's values, then rank 2's, ..., and sent to every
 * rank, so a job of threads gives the bits a job of processes gives. A
 * group gets its tags from the number of groups made before it, which is the
 * same on every rank because pp_comm_group_new is called in the same order.
 *
 * A rank that fails marks the job (pp_comm_mark_failed): every wait of the
 * other ranks, current or later, ends at once with an error naming it, so a
 * failure never leaves threads waiting for a timeout.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/comm/local.h"

/* Messages up to this size are copied at once and the send returns (eager);
 * longer ones are copied by the receiver straight from the sender's buffer,
 * the send returning once it has (rendezvous, as MPI does for long
 * messages): no allocation, and one copy, per message. */
#define EAGER_BYTES ((size_t)64 << 10)

typedef struct local_msg {
    struct local_msg *next;
    int src, dst, tag;
    size_t bytes;
    const void *data;      /* eager: inline below; rendezvous: the sender's buffer */
    bool eager;
    bool claimed, done;    /* rendezvous: a receiver took it, and has copied it */
    unsigned char inline_data[];
} local_msg;

typedef struct local_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a message arrived, or a rank failed */
    int size, refs;
    int *ranks;            /* (size) 0..size-1: the job as a member list */
    local_msg *head, *tail;
    int failed;            /* the first rank that failed; -1: none */
    char why[200];
    struct local_rank *held; /* (size) the ranks' states, freed with the job */
} local_job;

/* A rank's state (c->state): its hold on the job and what is its own. */
typedef struct local_rank {
    local_job *job;
    int groups;            /* groups this rank made in the job */
    float *scratch;        /* (scratch_n) rank 0's receive buffer for the job's sums, kept
                              between them (fresh pages are slow) */
    size_t scratch_n;
} local_rank;

static local_job *job_of(const pp_comm *c) { return ((local_rank *)c->state)->job; }

const void *pp_comm_local_job(const pp_comm *c)
{
    return c && c->ops == pp_comm_local_ops() && c->state ? job_of(c) : NULL;
}

/* Tags of the collectives (the user's are 0..PP_COMM_TAG_MAX). */
enum {
    TAG_SUM = PP_COMM_TAG_MAX + 1, TAG_SUM_OUT, TAG_BCAST, TAG_BARRIER, TAG_GROUP_IN,
    TAG_GROUP_OUT,
    TAG_GROUPS /* group k: TAG_GROUPS + 4k + {0 sum in, 1 sum out, 2 broadcast} */
};

/* Drops one hold on the job; the last frees it. */
static void job_release(local_job *job)
{
    pthread_mutex_lock(&job->mu);
    bool last = --job->refs <= 0;
    pthread_mutex_unlock(&job->mu);
    if (!last) return;
    for (local_msg *m = job->head, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    pthread_cond_destroy(&job->cv);
    pthread_mutex_destroy(&job->mu);
    free(job->ranks);
    free(job->held);
    free(job);
}

pp_status pp_comm_local_join(pp_comm *const *ranks, int size, pp_error *err)
{
    local_job *job = calloc(1, sizeof *job);
    if (!job) return pp_error_set(err, PP_ERR_OOM, "out of host memory (a job of threads)");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&job->mu, NULL);
    pthread_cond_init(&job->cv, &ca);
    pthread_condattr_destroy(&ca);
    job->size = size;
    job->failed = -1;
    job->ranks = malloc((size_t)size * sizeof *job->ranks);
    local_rank *held = calloc((size_t)size, sizeof *held);
    if (!job->ranks || !held) {
        free(held);
        job_release(job); /* refs 0: the last hold */
        return pp_error_set(err, PP_ERR_OOM, "out of host memory (a job of threads)");
    }
    for (int r = 0; r < size; r++) job->ranks[r] = r;
    job->held = held;
    for (int r = 0; r < size; r++) {
        held[r].job = job;
        ranks[r]->state = &held[r];
        job->refs++;
    }
    return PP_OK;
}

static void local_finalize(pp_comm *c)
{
    local_rank *me = c->state;
    free(me->scratch);
    job_release(me->job);
}

static void local_mark_failed(pp_comm *c, const char *msg)
{
    local_job *job = job_of(c);
    pthread_mutex_lock(&job->mu);
    if (job->failed < 0) {
        job->failed = c->rank;
        snprintf(job->why, sizeof job->why, "%s", msg && *msg ? msg : "failed");
    }
    pthread_cond_broadcast(&job->cv);
    pthread_mutex_unlock(&job->mu);
}

static bool local_first_failure(const pp_comm *c, int *rank, char *msg, size_t n)
{
    local_job *job = job_of(c);
    pthread_mutex_lock(&job->mu);
    bool failed = job->failed >= 0;
    if (failed) {
        *rank = job->failed;
        snprintf(msg, n, "%s", job->why);
    }
    pthread_mutex_unlock(&job->mu);
    return failed;
}

/* A deadline `seconds` from now on the job's clock. */
static struct timespec deadline(double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double at = (double)t.tv_sec + t.tv_nsec * 1e-9 + seconds;
    t.tv_sec = (time_t)at;
    t.tv_nsec = (long)((at - (double)t.tv_sec) * 1e9);
    return t;
}

static void enqueue(local_job *job, local_msg *m)
{
    if (job->tail)
        job->tail->next = m;
    else
        job->head = m;
    job->tail = m;
    pthread_cond_broadcast(&job->cv);
}

/* Takes m out of the queue (it is in it). Under the job's lock. */
static void unlink_msg(local_job *job, local_msg *m)
{
    for (local_msg **at = &job->head, *prev = NULL; *at; prev = *at, at = &(*at)->next)
        if (*at == m) {
            *at = m->next;
            if (job->tail == m) job->tail = prev;
            return;
        }
}

static pp_status local_send(pp_comm *c, int peer, int tag, const void *buf, size_t bytes,
                            pp_error *err)
{
    local_job *job = job_of(c);
    if (bytes <= EAGER_BYTES) {
        local_msg *m = malloc(sizeof *m + bytes);
        if (!m)
            return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (a message of "
                                "%zu bytes to rank %d)", c->rank, bytes, peer);
        *m = (local_msg){.src = c->rank, .dst = peer, .tag = tag, .bytes = bytes, .eager = true};
        if (bytes) memcpy(m->inline_data, buf, bytes);
        m->data = m->inline_data;
        pthread_mutex_lock(&job->mu);
        enqueue(job, m);
        pthread_mutex_unlock(&job->mu);
        return PP_OK;
    }
    local_msg m = {.src = c->rank, .dst = peer, .tag = tag, .bytes = bytes, .data = buf};
    struct timespec until = deadline(c->timeout_s);
    pthread_mutex_lock(&job->mu);
    enqueue(job, &m);
    int rc = 0, failed = -1;
    while (!m.done) {
        /* once claimed, the receiver is copying from buf: wait for it */
        if (!m.claimed && (job->failed >= 0 || rc == ETIMEDOUT)) {
            unlink_msg(job, &m);
            failed = job->failed;
            break;
        }
        rc = c->timeout_s > 0 && !m.claimed
                 ? pthread_cond_timedwait(&job->cv, &job->mu, &until)
                 : pthread_cond_wait(&job->cv, &job->mu);
    }
    char why[sizeof job->why];
    memcpy(why, job->why, sizeof why);
    pthread_mutex_unlock(&job->mu);
    if (m.done) return PP_OK;
    if (failed >= 0)
        return pp_error_set(err, PP_ERR_BACKEND, "rank %d: send to rank %d: rank %d failed: %s",
                            c->rank, peer, failed, why);
    return pp_error_set(err, PP_ERR_BACKEND, "rank %d: send to rank %d: nothing within %g s "
                        "(the thread may have stopped)", c->rank, peer, c->timeout_s);
}

/* Takes the oldest message from src to dst with tag out of the queue; NULL
 * when there is none. Under the job's lock. */
static local_msg *take(local_job *job, int src, int dst, int tag)
{
    for (local_msg *m = job->head; m; m = m->next)
        if (m->src == src && m->dst == dst && m->tag == tag) {
            unlink_msg(job, m);
            return m;
        }
    return NULL;
}

static pp_status local_recv(pp_comm *c, int peer, int tag, void *buf, size_t bytes,
                            pp_error *err)
{
    local_job *job = job_of(c);
    struct timespec until = deadline(c->timeout_s);
    pthread_mutex_lock(&job->mu);
    local_msg *m;
    int rc = 0;
    while (!(m = take(job, peer, c->rank, tag)) && job->failed < 0 && rc != ETIMEDOUT)
        rc = c->timeout_s > 0 ? pthread_cond_timedwait(&job->cv, &job->mu, &until)
                              : pthread_cond_wait(&job->cv, &job->mu);
    int failed = job->failed;
    char why[sizeof job->why];
    memcpy(why, job->why, sizeof why);
    if (m && !m->eager) m->claimed = true;
    pthread_mutex_unlock(&job->mu);
    if (!m && failed >= 0)
        return pp_error_set(err, PP_ERR_BACKEND, "rank %d: receive from rank %d: rank %d "
                            "failed: %s", c->rank, peer, failed, why);
    if (!m)
        return pp_error_set(err, PP_ERR_BACKEND, "rank %d: receive from rank %d: nothing within "
                            "%g s (the thread may have stopped)", c->rank, peer, c->timeout_s);
    pp_status s = PP_OK;
    if (m->bytes != bytes)
        s = pp_error_set(err, PP_ERR_BACKEND, "rank %d: receive from rank %d (tag %d): expected "
                         "%zu bytes, got %zu", c->rank, peer, tag, bytes, m->bytes);
    else if (bytes)
        memcpy(buf, m->data, bytes);
    if (m->eager) {
        free(m);
        return s;
    }
    pthread_mutex_lock(&job->mu);
    m->done = true; /* the sender may return (and m go) from here on */
    pthread_cond_broadcast(&job->cv);
    pthread_mutex_unlock(&job->mu);
    return s;
}

/* Rank 0 (member 0) adds the others' floats in rank order and sends the sum
 * back: members are job ranks members[0..n), this rank is member `me`. */
static pp_status ordered_sum(pp_comm *c, const int *members, int n, int me, int tag_in,
                             int tag_out, float *buf, size_t count, float **scratch,
                             size_t *scratch_n, pp_error *err)
{
    size_t bytes = count * sizeof *buf;
    if (me) {
        PP_TRY(local_send(c, members[0], tag_in, buf, bytes, err));
        return local_recv(c, members[0], tag_out, buf, bytes, err);
    }
    if (*scratch_n < count) {
        float *t = realloc(*scratch, count * sizeof *t);
        if (!t) return pp_error_set(err, PP_ERR_OOM, "rank %d: out of host memory (a sum of %zu "
                                    "floats)", c->rank, count);
        *scratch = t;
        *scratch_n = count;
    }
    for (int k = 1; k < n; k++) {
        PP_TRY(local_recv(c, members[k], tag_in, *scratch, bytes, err));
        for (size_t i = 0; i < count; i++) buf[i] += (*scratch)[i];
    }
    for (int k = 1; k < n; k++) PP_TRY(local_send(c, members[k], tag_out, buf, bytes, err));
    return PP_OK;
}

static pp_status local_allreduce_sum_f32(pp_comm *c, float *buf, size_t n, pp_error *err)
{
    local_rank *me = c->state;
    return ordered_sum(c, me->job->ranks, c->size, c->rank, TAG_SUM, TAG_SUM_OUT, buf, n,
                       &me->scratch, &me->scratch_n, err);
}

static pp_status bcast(pp_comm *c, const int *members, int n, int me, int root, int tag,
                       void *buf, size_t bytes, pp_error *err)
{
    if (me != root) return local_recv(c, members[root], tag, buf, bytes, err);
    for (int k = 0; k < n; k++)
        if (k != root) PP_TRY(local_send(c, members[k], tag, buf, bytes, err));
    return PP_OK;
}

static pp_status local_broadcast(pp_comm *c, int root, void *buf, size_t bytes, pp_error *err)
{
    return bcast(c, job_of(c)->ranks, c->size, c->rank, root, TAG_BCAST, buf, bytes, err);
}

static pp_status local_barrier(pp_comm *c, pp_error *err)
{
    return local_allreduce_sum_f32(c, NULL, 0, err);
}

/* What each rank tells rank 0 when a group is made. */
typedef struct join_msg {
    int member, key;
} join_msg;

/* Rank 0 gathers every rank's (member, key), orders the members by key then
 * rank and sends each member the list; others receive theirs. */
static pp_status local_group_new(pp_comm *c, pp_comm_group *g, int key, pp_error *err)
{
    int id = ((local_rank *)c->state)->groups++;
    join_msg mine = {g != NULL, key};
    int size = c->size, *order = malloc((size_t)size * sizeof *order);
    join_msg *all = malloc((size_t)size * sizeof *all);
    pp_status s = order && all ? PP_OK : pp_error_set(err, PP_ERR_OOM, "rank %d: out of host "
                                                      "memory (group)", c->rank);
    int n = 0;
    if (s == PP_OK && c->rank == 0) {
        all[0] = mine;
        for (int r = 1; r < size && s == PP_OK; r++)
            s = local_recv(c, r, TAG_GROUP_IN, &all[r], sizeof all[r], err);
        for (int r = 0; s == PP_OK && r < size; r++) {
            if (!all[r].member) continue;
            int at = n++;
            while (at > 0 && all[order[at - 1]].key > all[r].key) {
                order[at] = order[at - 1];
                at--;
            }
            order[at] = r;
        }
        for (int k = 0; s == PP_OK && k < n; k++)
            if (order[k] != 0) {
                s = local_send(c, order[k], TAG_GROUP_OUT, &n, sizeof n, err);
                if (s == PP_OK)
                    s = local_send(c, order[k], TAG_GROUP_OUT, order,
                                           (size_t)n * sizeof *order, err);
            }
    } else if (s == PP_OK) {
        s = local_send(c, 0, TAG_GROUP_IN, &mine, sizeof mine, err);
        if (s == PP_OK && g) s = local_recv(c, 0, TAG_GROUP_OUT, &n, sizeof n, err);
        if (s == PP_OK && g && (n < 1 || n > size))
            s = pp_error_set(err, PP_ERR_INTERNAL, "rank %d: a group of %d members", c->rank, n);
        if (s == PP_OK && g)
            s = local_recv(c, 0, TAG_GROUP_OUT, order, (size_t)n * sizeof *order, err);
    }
    free(all);
    if (s != PP_OK || !g) {
        free(order);
        return s;
    }
    g->size = n;
    g->job_rank = order;
    g->rank = -1;
    for (int k = 0; k < n; k++)
        if (order[k] == c->rank) g->rank = k;
    g->tag = TAG_GROUPS + 4 * id;
    return PP_OK;
}

static pp_status local_group_sum_f32(pp_comm_group *g, float *buf, size_t n, pp_error *err)
{
    return ordered_sum(g->comm, g->job_rank, g->size, g->rank, g->tag, g->tag + 1,
                       buf, n, &g->scratch, &g->scratch_n, err);
}

static pp_status local_group_broadcast(pp_comm_group *g, int root, void *buf, size_t bytes,
                                       pp_error *err)
{
    return bcast(g->comm, g->job_rank, g->size, g->rank, root, g->tag + 2, buf, bytes,
                 err);
}

static const pp_comm_ops local_ops = {
    .name = "local",
    .finalize = local_finalize,
    .send = local_send,
    .recv = local_recv,
    .allreduce_sum_f32 = local_allreduce_sum_f32,
    .broadcast = local_broadcast,
    .barrier = local_barrier,
    .group_new = local_group_new,
    .group_sum_f32 = local_group_sum_f32,
    .group_broadcast = local_group_broadcast,
    .mark_failed = local_mark_failed,
    .first_failure = local_first_failure,
};

const pp_comm_ops *pp_comm_local_ops(void) { return &local_ops; }
