/* speculate.c — speculative decoding in the scheduler: a decoding sequence
 * drafts tokens — by prompt lookup, or from a draft model run beside the
 * target (its own KV pool and steps, before the step is planned) — that go
 * through the target together with its last token; each draft is checked
 * against the target's distribution, the accepted ones emitted, the rest
 * rolled back. The draft's length adapts to how the last one went. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "scheduler/sched_int.h"

/* How many tokens r may draft this step: its adaptive length within the
 * context and max_tokens (the step's room is settled when it is planned). */
static uint32_t sched_draft_len(const em_sched *s, const em_request *r)
{
    uint32_t k = r->spec_k ? r->spec_k : 1;
    if (r->n_done + 1 + k > s->be.max_ctx)
        k = s->be.max_ctx > r->n_done + 1 ? s->be.max_ctx - r->n_done - 1 : 0;
    if (r->max_tokens && r->n_gen + 1 + k > r->max_tokens)
        k = r->max_tokens > r->n_gen + 1 ? r->max_tokens - r->n_gen - 1 : 0;
    return k < EM_SCHED_MAX_DRAFT ? k : EM_SCHED_MAX_DRAFT;
}

/* Draft tokens for a decoding sequence that speculates (prompt lookup),
 * within the step's room (rows, logit rows, context, max_tokens) left
 * after the dec_left decodes still to place (this one's included): pushed
 * onto its tokens, r->n_draft of them. Not while many sequences decode
 * (the batch is compute-bound already: drafts would only add work). */
int sched_drafts(em_sched *s, em_request *r, uint32_t room, uint32_t L, uint32_t dec_left)
{
    if (s->n_running[0] + s->n_running[1] > EM_SCHED_SPEC_MAX_SEQS)
        return 0;
    uint32_t k = sched_draft_len(s, r);   /* within the context and max_tokens */
    if (room < dec_left + k)   /* the other decodes first: drafts never crowd them out */
        k = room > dec_left ? room - dec_left : 0;
    if (L + dec_left + k > s->be.max_logits)
        k = s->be.max_logits > L + dec_left ? s->be.max_logits - L - dec_left : 0;
    int32_t d[EM_SCHED_MAX_DRAFT];
    uint32_t n = 0;
    if (!r->spec_draft) {
        n = k ? em_prompt_lookup(r->toks, r->n_toks, k, d) : 0;
    } else if (r->d_n && r->d_base == r->n_toks) {   /* what the draft phase proposed for this position */
        n = r->d_n < k ? r->d_n : k;
        memcpy(d, r->dtok, n * sizeof *d);
    }
    for (uint32_t i = 0; i < n; i++)
        if (em_req_push_token(r, d[i])) {
            r->n_toks -= i;
            return 0;
        }
    r->n_draft = n;
    return n > 0;
}

/* ---- draft-model speculation ---------------------------------------------------------- */

/* After a step: keep of the draft's K/V what still matches r's tokens (its
 * positions up to d_base, and the proposals it fed that were accepted). */
static void sched_draft_settle(em_sched *s, em_request *r)
{
    if (r->d_slot < 0 || !r->d_n)
        return;
    uint32_t m = 0;
    while (m + 1 < r->d_n && r->d_base + m < r->n_toks && r->toks[r->d_base + m] == r->dtok[m])
        m++;
    r->d_done = r->d_base + m;
    r->d_n = 0;
    em_kv_seq_commit(s->dkv, r->d_slot, r->toks, r->d_done);
    em_kv_seq_truncate(s->dkv, r->d_slot, r->d_done);
}

/* A draft step failed: no more drafting (the target goes on without). */
void sched_draft_off(em_sched *s, const em_err *err)
{
    em_log(EM_LOG_ERROR, NULL, "scheduler: the draft model failed (%s): speculation with it is off",
           err->msg[0] ? err->msg : "draft step failed");
    s->has_draft = 0;
    for (em_request *r = s->running; r; r = r->next) {
        if (r->d_slot >= 0)
            em_kv_seq_close(s->dkv, r->d_slot);
        r->d_slot = -1;
        r->d_done = r->d_n = 0;
        r->spec_draft = 0;
        r->spec_max = 0;
    }
}

/* One draft step over the n_rows rows in d_*; 0 or the error (drafting then off). */
static int sched_draft_step(em_sched *s, uint32_t T, uint32_t L, uint32_t n_copies)
{
    em_err err = { 0 };
    int rc = n_copies ? s->dbe.copy(s->dbe.ctx, s->d_copies, n_copies, &err) : 0;
    if (!rc) {
        em_sched_batch b = { .n_tokens = T, .tokens = s->d_tok, .pos = s->d_pos, .seq = s->d_seq, .n_logits = L,
                             .logit_rows = s->d_rows, .tables = s->d_tables, .decode = s->d_dec,
                             .tables_window = s->dbe.window ? s->d_tables_w : NULL };
        rc = s->dbe.step(s->dbe.ctx, &b, s->d_logits, &err);
    }
    if (rc)
        sched_draft_off(s, &err);
    return rc;
}


/* Before the step is planned: every decoding sequence that speculates with
 * the draft model catches the draft up on its tokens (the whole prompt the
 * first time, in chunks as the draft's step allows; cached prefixes are
 * shared) and, caught up, has it propose up to draft_len tokens, each drawn
 * from the draft's distribution (kept in r->q for the target's check): one
 * batched draft step per proposed token. Not while many sequences run. */
void sched_draft_phase(em_sched *s)
{
    struct { em_request *r; uint32_t c, k; int full; } e[EM_SCHED_SPEC_MAX_SEQS];
    uint32_t n = 0, T = 0, L = 0, n_copies = 0, V = s->be.n_vocab;
    if (!s->has_draft || s->draft_down)
        return;
    for (em_request *r = s->running; r; r = r->next) {
        sched_draft_settle(s, r);
        if (r->d_slot >= 0 && !r->spec_max) {   /* stopped drafting: its blocks go back */
            em_kv_seq_close(s->dkv, r->d_slot);
            r->d_slot = -1;
            r->d_done = 0;
        }
    }
    if (s->n_running[0] + s->n_running[1] > EM_SCHED_SPEC_MAX_SEQS)
        return;
    for (em_request *r = s->running; r && n < EM_SCHED_SPEC_MAX_SEQS && T < s->dbe.max_tokens; r = r->next) {
        if (r->state != R_RUNNING || !r->spec_draft || !r->spec_max || r->n_toks - r->n_done != 1)
            continue;
        uint32_t k = sched_draft_len(s, r);
        if (!k)
            continue;
        if (!r->q && !(r->q = malloc((size_t)r->spec_max * V * sizeof *r->q)))
            continue;
        if (r->d_slot < 0) {
            if (em_kv_seq_open(s->dkv, &r->d_slot, NULL))
                continue;
            r->d_done = em_kv_seq_match(s->dkv, r->d_slot, r->toks, r->n_toks);
        }
        uint32_t need = r->n_toks - r->d_done, room = s->dbe.max_tokens - T;
        uint32_t c = need < room ? need : room;
        int full = c == need && L < s->dbe.max_logits;
        if (!full && c == need)
            c--;   /* no logit row left: catch up all but the last */
        if (!c)
            continue;
        uint32_t end = full ? r->n_toks + k - 1 : r->d_done + c;
        int rc;
        while ((rc = em_kv_seq_reserve(s->dkv, r->d_slot, r->d_done, end, s->d_copies, s->d_max_copies, &n_copies,
                                       NULL)) == EM_EBUSY) {
            /* the draft's pool is full: take the blocks of a sequence not drafting this step */
            em_request *v = NULL;
            for (em_request *o = s->running; o && !v; o = o->next) {
                int drafting = o == r;
                for (uint32_t i = 0; i < n && !drafting; i++)
                    drafting = e[i].r == o;
                if (o->d_slot >= 0 && !drafting)
                    v = o;
            }
            if (!v)
                break;
            em_kv_seq_close(s->dkv, v->d_slot);
            v->d_slot = -1;
            v->d_done = v->d_n = 0;
        }
        if (rc)
            continue;   /* no room in the draft's pool: no drafts for r this step */
        for (uint32_t i = 0; i < c; i++) {
            uint32_t p = r->d_done + i;
            s->d_tok[T] = r->toks[p];
            s->d_pos[T] = (int32_t)p;
            s->d_seq[T] = r->d_slot;
            s->d_dec[T] = c == 1 && p >= r->n_prompt;
            if (full && i + 1 == c)
                s->d_rows[L++] = (int32_t)T;
            T++;
        }
        s->d_tables[r->d_slot] = em_kv_seq_table(s->dkv, r->d_slot);
        s->d_tables_w[r->d_slot] = em_kv_seq_table_window(s->dkv, r->d_slot);
        e[n].r = r;
        e[n].c = c;
        e[n].k = k;
        e[n].full = full;
        n++;
    }
    if (!T || sched_draft_step(s, T, L, n_copies))
        return;
    uint32_t li = 0, rounds = 0;
    for (uint32_t i = 0; i < n; i++) {
        em_request *r = e[i].r;
        r->d_done += e[i].c;
        em_kv_seq_commit(s->dkv, r->d_slot, r->toks, r->d_done);
        if (!e[i].full)
            continue;
        em_sampler_dist(r->dsampler, s->d_logits + (size_t)li++ * V, 0, r->q);
        r->dtok[0] = em_sampler_draw_dist(r->dsampler, r->q);
        r->d_base = r->n_toks;
        r->d_n = 1;
        rounds = e[i].k > rounds ? e[i].k : rounds;
    }
    /* each further round feeds every sequence's newest proposal */
    for (uint32_t j = 1; j < rounds; j++) {
        T = L = 0;
        for (uint32_t i = 0; i < n; i++) {
            em_request *r = e[i].r;
            if (!e[i].full || e[i].k <= j)
                continue;
            s->d_tok[T] = r->dtok[j - 1];
            s->d_pos[T] = (int32_t)(r->d_base + j - 1);
            s->d_seq[T] = r->d_slot;
            s->d_dec[T] = 1;
            s->d_rows[L++] = (int32_t)T;
            T++;
        }
        if (sched_draft_step(s, T, L, 0))
            return;
        li = 0;
        for (uint32_t i = 0; i < n; i++) {
            em_request *r = e[i].r;
            if (!e[i].full || e[i].k <= j)
                continue;
            float *q = r->q + (size_t)j * V;
            em_sampler_dist(r->dsampler, s->d_logits + (size_t)li++ * V, 0, q);
            r->dtok[j] = em_sampler_draw_dist(r->dsampler, q);
            r->d_n = j + 1;
        }
    }
}

/* A speculating sequence's step: its last token and n drafted ones went
 * through the model together (rows li0 .. li0 + n). Each draft is checked
 * against the row before it (em_sampler_verify: the target's distribution
 * exactly); the accepted ones and the first correction — or, all accepted,
 * a token from the last row — are emitted, the rest rolled back (their
 * positions' K/V is overwritten later; whole blocks past them go back). */
void sched_spec_advance(em_sched *s, em_request *r, uint32_t li0, double now, uint32_t *gen)
{
    uint32_t n = r->n_draft, base = r->n_done;
    int32_t drafts[EM_SCHED_MAX_DRAFT];
    memcpy(drafts, r->toks + base + 1, n * sizeof *drafts);
    r->n_toks = base + 1;   /* the drafts leave; what is accepted comes back as emitted */
    r->n_draft = 0;
    r->n_done = base + 1;
    em_kv_seq_commit(s->kv, r->slot, r->toks, r->n_done);
    uint32_t acc = 0;
    for (uint32_t j = 0; j <= n; j++) {
        const float *row = s->on_device ? s->be.row(s->be.ctx, li0 + j)
                                        : s->logits + (size_t)(li0 + j) * s->be.n_vocab;
        int ok = 0;
        int32_t id = j < n && r->spec_draft
                         ? em_sampler_verify_dist(r->sampler, row, s->on_device, drafts[j],
                                                  r->q + (size_t)j * s->be.n_vocab, &ok)
                   : j < n ? em_sampler_verify(r->sampler, row, s->on_device, drafts[j], &ok)
                   : s->on_device ? em_sampler_sample_steered(r->sampler, row, 0, NULL)
                                  : em_sampler_sample_lp(r->sampler, row, NULL, 0, NULL);
        (*gen)++;
        r->n_done = base + 1 + j;   /* the K/V of the last token and the drafts taken so far */
        acc += ok;
        if (j == n || !ok) {   /* the last token of this step: counted before r may go */
            s->spec_drafted += n;
            s->spec_accepted += acc;
        }
        if (id < 0) {
            sched_finish_running(s, r, EM_FINISH_ERROR, "out of memory");
            return;
        }
        if (sched_emit_one(s, r, id, NULL, now))
            return;   /* finished: r may be gone */
        if (!ok)
            break;
    }
    em_kv_seq_commit(s->kv, r->slot, r->toks, r->n_done);
    em_kv_seq_truncate(s->kv, r->slot, r->n_done);
    /* the next draft's length follows how this one went; a sequence whose
     * drafts keep failing stops drafting */
    r->spec_k = acc == n ? (r->spec_k < r->spec_max ? r->spec_k + 1 : r->spec_max) : acc + 1;
    r->spec_drafted += n;
    r->spec_accepted += acc;
    if (r->spec_drafted >= 24 && r->spec_accepted * 4 < r->spec_drafted)
        r->spec_max = 0;
}
