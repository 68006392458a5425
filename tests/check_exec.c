/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * tests/check_exec.c -- src/collectives/exec.c over fake transports: which memory
 * registration each receive carries (the staging slots' registration with the link's
 * own transport for a receive into a slot, NULL for user memory), with the reduced
 * values checked against a sum computed here; the asynchronous memory operations'
 * states, on a memory table whose operations finish only when the test says so; and the
 * stage slots' pipeline (stage.c), with sends that complete only when the test says so.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/exec.h"
#include "collectives/memops.h"
#include "core/check.h"
#include "run_suite.h"

// ----- two fake transports ------------------------------------------------------------------

/* A fake receive completes at once: it fills its buffer with floats of value 10 x peer.
 * Every irecv is logged with its buffer and mr. */
#define LOG_MAX 32
struct posted_recv {
    const struct hoop_transport *tp;
    int peer;
    void *buf, *mr;
};
static struct posted_recv posted[LOG_MAX];
static int nposted;
static char req_token;

static hoop_status fake_irecv(struct hoop_tp_comm *c, void *buf, size_t bytes, void *mr, void **req)
{
    ck_assert_int_lt(nposted, LOG_MAX);
    posted[nposted++] = (struct posted_recv){.tp = c->tp, .peer = c->peer, .buf = buf, .mr = mr};
    for (size_t i = 0; i < bytes / sizeof(float); i++) ((float *)buf)[i] = 10.0f * (float)c->peer;
    *req = &req_token;
    return HOOP_OK;
}

static hoop_status fake_test(void *req, int *done, size_t *bytes)
{
    ck_assert_ptr_eq(req, &req_token);
    *done = 1;
    (void)bytes;
    return HOOP_OK;
}

static const struct hoop_transport fake_a = {.name = "fa", .irecv = fake_irecv, .test = fake_test};
static const struct hoop_transport fake_b = {.name = "fb", .irecv = fake_irecv, .test = fake_test};
static const struct hoop_transport fake_c = {.name = "fc", .irecv = fake_irecv, .test = fake_test};

/* The schedule of rank 0 of 4: from each of ranks 1 (over fa), 2 (fb) and 3 (fc, which
 * has no registration) a RECV_REDUCE (into a slot) and a plain RECV (into the user's
 * buffer), 4 floats each. */
START_TEST(test_slot_mr)
{
    enum { N = 4, W = 4 }; /* floats per step, world size */
    float in[3 * 2 * N], out[3 * 2 * N];
    char slots[4 * 64];
    int mr_a, mr_b; /* their addresses are the registrations */
    struct hoop_tp_comm ca = {.tp = &fake_a, .peer = 1}, cb = {.tp = &fake_b, .peer = 2},
                        cc = {.tp = &fake_c, .peer = 3};
    struct hoop_tp_comm *recv[W] = {NULL, &ca, &cb, &cc}, *send[W] = {0};
    const hoop__tp_open tps[] = {{.tp = &fake_a, .slot_mr = &mr_a},
                                 {.tp = &fake_b, .slot_mr = &mr_b},
                                 {.tp = &fake_c, .slot_mr = NULL}};
    hoop__sched s = {0};
    for (size_t i = 0; i < 3 * 2 * N; i++) in[i] = (float)i, out[i] = -1;
    for (int p = 1; p < W; p++) {
        size_t off = (size_t)(p - 1) * 2 * N * sizeof(float);
        hoop__sched_add(&s, (hoop__step){.kind = HOOP__STEP_RECV_REDUCE,
                                         .buf = HOOP__BUF_RECV,
                                         .src_buf = HOOP__BUF_SEND,
                                         .peer = p,
                                         .dep = {-1, -1},
                                         .off = off,
                                         .src_off = off,
                                         .bytes = N * sizeof(float)});
        hoop__sched_add(&s, (hoop__step){.kind = HOOP__STEP_RECV,
                                         .buf = HOOP__BUF_RECV,
                                         .peer = p,
                                         .dep = {-1, -1},
                                         .off = off + N * sizeof(float),
                                         .bytes = N * sizeof(float)});
    }
    ck_assert_int_eq(s.err, HOOP_OK);
    hoop__exec_env env = {.world_size = W,
                          .rank = 0,
                          .send = send,
                          .recv = recv,
                          .bufs = {in, out},
                          .slots = slots,
                          .slot_bytes = 64,
                          .nslots = 4,
                          .depth = 4,
                          .tps = tps,
                          .ntps = 3,
                          .dtype = HOOP_DTYPE_F32,
                          .op = HOOP_OP_SUM,
                          .elem = sizeof(float)};
    hoop__exec *x;
    int progressed, done = 0;
    nposted = 0;
    ck_assert_int_eq(hoop__exec_start(&x, &s, &env), HOOP_OK);
    for (int i = 0; i < 10 && !done; i++)
        ck_assert_int_eq(hoop__exec_progress(x, &progressed, &done), HOOP_OK);
    ck_assert_int_eq(done, 1);
    hoop__exec_free(x);
    hoop__sched_free(&s);
    ck_assert_int_eq(nposted, 6);
    int into_slots = 0;
    for (int i = 0; i < nposted; i++) {
        int in_slot =
            (char *)posted[i].buf >= slots && (char *)posted[i].buf < slots + sizeof(slots);
        void *want = !in_slot                  ? NULL
                     : posted[i].tp == &fake_a ? (void *)&mr_a
                     : posted[i].tp == &fake_b ? (void *)&mr_b
                                               : NULL;
        ck_assert_msg(posted[i].mr == want,
                      "receive %d from rank %d (%s, %s) carried mr %p, not %p", i, posted[i].peer,
                      posted[i].tp->name, in_slot ? "slot" : "user memory", posted[i].mr, want);
        ck_assert_int_eq(posted[i].peer, posted[i].tp == &fake_a   ? 1
                                         : posted[i].tp == &fake_b ? 2
                                                                   : 3);
        into_slots += in_slot;
    }
    ck_assert_int_eq(into_slots, 3); /* the RECV_REDUCEs */
    for (int p = 1; p < W; p++)
        for (int j = 0; j < 2 * N; j++) {
            size_t i = (size_t)(p - 1) * 2 * N + (size_t)j;
            float want = j < N ? 10.0f * (float)p + (float)i : 10.0f * (float)p;
            ck_assert_msg(out[i] == want, "out[%zu] = %g, not %g", i, out[i], want);
        }
}
END_TEST

// ----- a memory table that finishes only when the test says so -----------------------------

/* Jobs are kept, not run: job k runs (hoop__memjob_run) and reports done only once the
 * test has released it (k < released). wait() runs and releases it at once. */
#define JOBS_MAX 16
static hoop__memjob jobs[JOBS_MAX];
static int njobs, released, nwaited;
static hoop__memop *const job_op0 = (hoop__memop *)&jobs[0]; /* op k = &jobs[k] */

static int fail_start; /* held_start fails, as a device's launch may */

static hoop_status held_start(hoop__memops *m, const hoop__memjob *j, hoop__memop **op)
{
    (void)m;
    if (fail_start) return HOOP_ERROR(HOOP_ERR_CUDA, "held_start: failing on purpose");
    ck_assert_int_lt(njobs, JOBS_MAX);
    jobs[njobs] = *j;
    *op = (hoop__memop *)&jobs[njobs++];
    return HOOP_OK;
}

static hoop_status held_test(hoop__memops *m, hoop__memop *op, int *done)
{
    (void)m;
    int k = (int)((hoop__memjob *)op - (hoop__memjob *)job_op0);
    ck_assert(k >= 0 && k < njobs);
    *done = k < released;
    if (*done) hoop__memjob_run(&jobs[k]);
    return HOOP_OK;
}

static hoop_status held_wait(hoop__memops *m, hoop__memop *op, int64_t timeout_ms)
{
    (void)m;
    (void)op;
    ck_assert_int_gt(timeout_ms, 0);
    nwaited++;
    return HOOP_OK;
}

static hoop_status held_close(hoop__memops *m)
{
    (void)m;
    return HOOP_OK;
}

static const hoop__memops_vt held_vt = {
    .name = "held", .start = held_start, .test = held_test, .wait = held_wait, .close = held_close};

static void progress_rounds(hoop__exec *x, int rounds, int *done)
{
    int progressed;
    for (int i = 0; i < rounds; i++)
        ck_assert_int_eq(hoop__exec_progress(x, &progressed, done), HOOP_OK);
}

/* With one slot, three RECV_REDUCEs from rank 1 and two local COPYs: the slot is given
 * back only when its reduction finished (the next receive waits for that), the second
 * COPY starts only when the first finished, and the values are those of the jobs run in
 * order; freeing an execution with an operation in flight waits for it. */
START_TEST(test_async_memops)
{
    enum { N = 4 };
    float in[3 * N], out[3 * N], scratch[2 * N];
    char slots[64];
    struct hoop_tp_comm c1 = {.tp = &fake_a, .peer = 1};
    struct hoop_tp_comm *recv[2] = {NULL, &c1}, *send[2] = {0};
    hoop__memops held = {.vt = &held_vt};
    hoop__sched s = {0};
    for (size_t i = 0; i < 3 * N; i++) in[i] = (float)i, out[i] = -1;
    for (int k = 0; k < 3; k++)
        hoop__sched_add(&s, (hoop__step){.kind = HOOP__STEP_RECV_REDUCE,
                                         .buf = HOOP__BUF_RECV,
                                         .src_buf = HOOP__BUF_SEND,
                                         .peer = 1,
                                         .dep = {-1, -1},
                                         .off = (size_t)k * N * sizeof(float),
                                         .src_off = (size_t)k * N * sizeof(float),
                                         .bytes = N * sizeof(float)});
    for (int k = 0; k < 2; k++) /* scratch block k = out block 0: both ready at once */
        hoop__sched_add(&s, (hoop__step){.kind = HOOP__STEP_COPY,
                                         .buf = HOOP__BUF_SCRATCH,
                                         .src_buf = HOOP__BUF_RECV,
                                         .dep = {0, -1},
                                         .off = (size_t)k * N * sizeof(float),
                                         .bytes = N * sizeof(float)});
    ck_assert_int_eq(s.err, HOOP_OK);
    hoop__exec_env env = {.world_size = 2,
                          .recv = recv,
                          .send = send,
                          .bufs = {in, out, scratch},
                          .slots = slots,
                          .slot_bytes = sizeof(slots),
                          .nslots = 1,
                          .depth = 4,
                          .dtype = HOOP_DTYPE_F32,
                          .op = HOOP_OP_SUM,
                          .elem = sizeof(float),
                          .mem = &held};
    hoop__exec *x;
    int done = 0;
    nposted = njobs = released = nwaited = 0;
    ck_assert_int_eq(hoop__exec_start(&x, &s, &env), HOOP_OK);
    progress_rounds(x, 5, &done);
    ck_assert_int_eq(nposted, 1); /* one slot: taken by the first reduction, still running */
    ck_assert_int_eq(njobs, 1);
    ck_assert_int_eq(hoop__exec_memops_pending(x), 1);
    ck_assert(out[0] == -1.0f); /* not run yet */
    released = 1;               /* reduction 0 done: the slot comes back, COPY 0 starts */
    progress_rounds(x, 3, &done);
    ck_assert_int_eq(nposted, 2);
    ck_assert_int_eq(njobs, 3); /* reduction 0, COPY 0, reduction 1 */
    ck_assert_int_eq(jobs[1].kind, HOOP__MJ_COPY);
    released = 3;
    progress_rounds(x, 3, &done);
    ck_assert_int_eq(nposted, 3);
    ck_assert_int_eq(njobs, 5); /* + COPY 1 (after COPY 0 finished) and reduction 2 */
    ck_assert_int_eq(jobs[3].kind, HOOP__MJ_COPY);
    ck_assert_ptr_eq(jobs[3].dst, (char *)scratch + N * sizeof(float));
    ck_assert_int_eq(done, 0);
    released = 4; /* all but reduction 2 */
    progress_rounds(x, 3, &done);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(hoop__exec_memops_pending(x), 1);
    hoop__exec_free(x); /* as a failed call would: waits for reduction 2 */
    ck_assert_int_eq(nwaited, 1);
    hoop__sched_free(&s);
    for (int i = 0; i < 2 * N; i++) {
        ck_assert_msg(out[i] == 10.0f + (float)i, "out[%d] = %g", i, out[i]);
        ck_assert_msg(scratch[i] == out[i % N], "scratch[%d] = %g", i, scratch[i]);
    }
}
END_TEST

/* A memory operation that fails is this rank's failure: the execution names no peer
 * (a receive that merely waited for a slot in the same round must not be blamed). */
START_TEST(test_memop_error_names_no_peer)
{
    enum { N = 4 };
    float in[2 * N], out[2 * N];
    char slots[64];
    struct hoop_tp_comm c1 = {.tp = &fake_a, .peer = 1};
    struct hoop_tp_comm *recv[2] = {NULL, &c1}, *send[2] = {0};
    hoop__memops held = {.vt = &held_vt};
    hoop__sched s = {0};
    for (int k = 0; k < 2; k++)
        hoop__sched_add(&s, (hoop__step){.kind = HOOP__STEP_RECV_REDUCE,
                                         .buf = HOOP__BUF_RECV,
                                         .src_buf = HOOP__BUF_SEND,
                                         .peer = 1,
                                         .dep = {-1, -1},
                                         .off = (size_t)k * N * sizeof(float),
                                         .src_off = (size_t)k * N * sizeof(float),
                                         .bytes = N * sizeof(float)});
    hoop__exec_env env = {.world_size = 2,
                          .recv = recv,
                          .send = send,
                          .bufs = {in, out},
                          .slots = slots,
                          .slot_bytes = sizeof(slots),
                          .nslots = 1,
                          .depth = 4,
                          .dtype = HOOP_DTYPE_F32,
                          .op = HOOP_OP_SUM,
                          .elem = sizeof(float),
                          .mem = &held};
    hoop__exec *x;
    int progressed, done;
    nposted = njobs = released = nwaited = 0;
    fail_start = 1;
    ck_assert_int_eq(hoop__exec_start(&x, &s, &env), HOOP_OK);
    ck_assert_int_eq(hoop__exec_progress(x, &progressed, &done), HOOP_ERR_CUDA);
    ck_assert_int_eq(hoop__exec_failed_peer(x), -1);
    fail_start = 0;
    hoop__exec_free(x);
    hoop__sched_free(&s);
}
END_TEST

/* A step towards a rank the comm has no link to fails the call at once, naming the step:
 * the executor's backstop for a schedule that hoop__sched_check did not see (through a
 * comm, the check refuses it first and says where peers are chosen: check_badsched's
 * test_no_link). */
START_TEST(test_unlinked_peer_named)
{
    float in[4] = {1, 2, 3, 4}, out[4];
    struct hoop_tp_comm c1 = {.tp = &fake_a, .peer = 1};
    struct hoop_tp_comm *recv[3] = {NULL, &c1, NULL}, *send[3] = {NULL, &c1, NULL};
    hoop__sched s = {0};
    hoop__sched_add(&s, (hoop__step){.kind = HOOP__STEP_SEND,
                                     .buf = HOOP__BUF_SEND,
                                     .peer = 2,
                                     .dep = {-1, -1},
                                     .bytes = sizeof(in)});
    hoop__exec_env env = {.world_size = 3,
                          .recv = recv,
                          .send = send,
                          .bufs = {in, out},
                          .depth = 4,
                          .dtype = HOOP_DTYPE_F32,
                          .op = HOOP_OP_SUM,
                          .elem = sizeof(float)};
    hoop__exec *x;
    int progressed, done;
    ck_assert_int_eq(hoop__exec_start(&x, &s, &env), HOOP_OK);
    ck_assert_int_eq(hoop__exec_progress(x, &progressed, &done), HOOP_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(hoop_last_error(), "step 0: no link to rank 2"));
    hoop__exec_free(x);
    hoop__sched_free(&s);
}
END_TEST

/* The async table runs its queue in order: waiting for a job behind one never polled
 * lets that one run too (a failed call drains its operations in step order, not in the
 * order they were started). */
START_TEST(test_async_wait_behind_unpolled)
{
    hoop__memops *m;
    char a[64], b[64], da[64] = {0}, db[64] = {0};
    memset(a, 1, sizeof(a));
    memset(b, 2, sizeof(b));
    ck_assert_int_eq(hoop__memops_open("async", NULL, NULL, &m), HOOP_OK);
    hoop__memop *op1, *op2;
    hoop__memjob j1 = {.kind = HOOP__MJ_COPY, .dst = da, .a = a, .bytes = sizeof(a)};
    hoop__memjob j2 = {.kind = HOOP__MJ_COPY, .dst = db, .a = b, .bytes = sizeof(b)};
    ck_assert_int_eq(m->vt->start(m, &j1, &op1), HOOP_OK);
    ck_assert_int_eq(m->vt->start(m, &j2, &op2), HOOP_OK);
    ck_assert_int_eq(m->vt->wait(m, op2, 2000), HOOP_OK); /* op1 was never polled */
    ck_assert_int_eq(m->vt->wait(m, op1, 2000), HOOP_OK);
    ck_assert(memcmp(da, a, sizeof(a)) == 0 && memcmp(db, b, sizeof(b)) == 0);
    hoop__memops_close(m);
}
END_TEST

// ----- stage slots: a transport whose sends complete only when the test says so -----------

/* Send k completes once k < sends_done; at completion the fake copies out what the
 * buffer holds then (what a real transport would have put on the wire by then). */
#define SENDS_MAX 8
static struct {
    const void *buf;
    size_t bytes;
    float wire[4];
} sent[SENDS_MAX];
static int nsent, sends_done;

static hoop_status fake_isend(struct hoop_tp_comm *c, const void *buf, size_t bytes, void *mr,
                              void **req)
{
    (void)c;
    (void)mr;
    ck_assert_int_lt(nsent, SENDS_MAX);
    ck_assert_uint_le(bytes, sizeof(sent[0].wire));
    sent[nsent].buf = buf;
    sent[nsent].bytes = bytes;
    *req = &sent[nsent++];
    return HOOP_OK;
}

static hoop_status fake_send_test(void *req, int *done, size_t *bytes)
{
    int k = (int)((char *)req - (char *)&sent[0]) / (int)sizeof(sent[0]);
    (void)bytes;
    ck_assert(k >= 0 && k < nsent);
    *done = k < sends_done;
    if (*done) memcpy(sent[k].wire, sent[k].buf, sent[k].bytes);
    return HOOP_OK;
}

static const struct hoop_transport fake_s = {
    .name = "fs", .isend = fake_isend, .test = fake_send_test};

/* Five staged SENDs of 4 floats to rank 1 through 3 stage slots (sends hold at most 2, the
 * last one stays the receives'): two copies start, the sends go out of their slots once the
 * copies finished, and a third copy starts only once a send completed (its slot came back);
 * what each send carried is its own chunk. */
START_TEST(test_stage_slots)
{
    enum { N = 4, STEPS = 5 };
    float in[STEPS * N], stage[3 * N];
    struct hoop_tp_comm c1 = {.tp = &fake_s, .peer = 1};
    struct hoop_tp_comm *send[2] = {NULL, &c1}, *recv[2] = {0};
    hoop__memops held = {.vt = &held_vt};
    hoop__sched s = {0};
    int peak = 0;
    for (size_t i = 0; i < STEPS * N; i++) in[i] = (float)i;
    for (int k = 0; k < STEPS; k++)
        hoop__sched_add(&s, (hoop__step){.kind = HOOP__STEP_SEND,
                                         .buf = HOOP__BUF_SEND,
                                         .peer = 1,
                                         .dep = {-1, -1},
                                         .off = (size_t)k * N * sizeof(float),
                                         .bytes = N * sizeof(float)});
    ck_assert_int_eq(hoop__sched_stage(&s, 1u << HOOP__BUF_SEND, N * sizeof(float)), HOOP_OK);
    ck_assert_int_eq(hoop__sched_stage(&s, 1u << HOOP__BUF_SEND, 2), HOOP_ERR_INTERNAL);
    hoop__exec_env env = {.world_size = 2,
                          .recv = recv,
                          .send = send,
                          .bufs = {[HOOP__BUF_SEND] = in, [HOOP__BUF_STAGE] = stage},
                          .slot_bytes = N * sizeof(float),
                          .nstage = 3,
                          .stage_peak = &peak,
                          .depth = 8,
                          .dtype = HOOP_DTYPE_F32,
                          .op = HOOP_OP_SUM,
                          .elem = sizeof(float),
                          .mem = &held};
    hoop__exec *x;
    int done = 0;
    nsent = sends_done = njobs = released = nwaited = 0;
    ck_assert_int_eq(hoop__exec_start(&x, &s, &env), HOOP_OK);
    progress_rounds(x, 3, &done);
    ck_assert_int_eq(njobs, 2); /* two copies into slots; the third slot is the receives' */
    ck_assert_int_eq(nsent, 0); /* nothing leaves before its copy finished */
    released = 2;
    progress_rounds(x, 3, &done);
    ck_assert_int_eq(nsent, 2);
    ck_assert_int_eq(njobs, 2); /* both sends on the wire: their slots stay taken */
    for (int k = 0; k < 2; k++)
        ck_assert((const char *)sent[k].buf >= (char *)stage &&
                  (const char *)sent[k].buf < (char *)stage + sizeof(stage));
    sends_done = 1;
    progress_rounds(x, 3, &done);
    ck_assert_int_eq(njobs, 3); /* send 0's slot came back: chunk 2 is copied into it */
    ck_assert_ptr_eq(jobs[2].dst, sent[0].buf);
    released = STEPS;
    sends_done = STEPS;
    for (int i = 0; i < 20 && !done; i++) progress_rounds(x, 1, &done);
    ck_assert_int_eq(done, 1);
    ck_assert_int_eq(nsent, STEPS);
    ck_assert_int_eq(peak, 2);
    hoop__exec_free(x);
    hoop__sched_free(&s);
    for (int k = 0; k < STEPS; k++)
        for (int j = 0; j < N; j++)
            ck_assert_msg(sent[k].wire[j] == in[k * N + j], "send %d carried %g at %d, not %g", k,
                          sent[k].wire[j], j, in[k * N + j]);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_slot_mr);
    tcase_add_test(tc, test_async_memops);
    tcase_add_test(tc, test_memop_error_names_no_peer);
    tcase_add_test(tc, test_unlinked_peer_named);
    tcase_add_test(tc, test_async_wait_behind_unpolled);
    tcase_add_test(tc, test_stage_slots);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
