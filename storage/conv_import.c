/* conv_import.c — importing conversations (em_storage_conv_import): each
 * conversation's message tree is checked (fields, sizes, ids unique, every
 * parent a message of the same conversation, no cycles, the current leaf one
 * of its messages), put in an order where every parent comes before its
 * children (otherwise as given: siblings keep theirs), and written with new ids; all of them in
 * one transaction, so a refused import leaves nothing behind. */
#include "storage/storage_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE SIZE_MAX   /* no parent / no leaf */

typedef struct {
    int64_t id;
    size_t  idx;
} id_idx;

static int cmp_id(const void *a, const void *b)
{
    const id_idx *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The index of source id among sorted[0..n), or NONE. */
static size_t find(const id_idx *sorted, size_t n, int64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sorted[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && sorted[lo].id == id ? sorted[lo].idx : NONE;
}

/* One conversation's plan: each message's parent index (par, NONE for a
 * root), the insertion order (parents first, otherwise as given), the new
 * ids and the leaf's index. Arrays of c->n_msgs. */
typedef struct {
    size_t *par, *order, *depth, *stack;
    id_idx *sorted;
    int64_t *new_id;
    size_t  leaf;
} plan_t;

static void plan_free(plan_t *p)
{
    free(p->par);
    free(p->order);
    free(p->depth);
    free(p->stack);
    free(p->sorted);
    free(p->new_id);
}

static int check_messages(const em_conv_in *c, size_t ci, em_err *err)
{
    for (size_t j = 0; j < c->n_msgs; j++) {
        const em_message_in *m = &c->msgs[j];
        char what[96];
        snprintf(what, sizeof what, "conversations[%zu].messages[%zu]", ci, j);
        if (m->id <= 0)
            return em_err_set(err, EM_EINVAL, "%s.id: must be a positive integer", what);
        if (m->parent_id < 0)
            return em_err_set(err, EM_EINVAL, "%s.parent_id: must be null or a message id", what);
        if (m->tokens < 0 || m->created_ms < 0)
            return em_err_set(err, EM_EINVAL, "%s: tokens and created_ms must not be negative", what);
        int ret = em_sto_message_check(m->role, m->content, m->finish_reason, what, err);
        if (ret)
            return ret;
    }
    return 0;
}

static int plan_make(const em_conv_in *c, size_t ci, plan_t *p, em_err *err)
{
    size_t n = c->n_msgs;
    memset(p, 0, sizeof *p);
    p->leaf = NONE;
    int ret = check_messages(c, ci, err);
    if (ret)
        return ret;
    size_t cells = n ? n : 1;
    p->par = malloc(cells * sizeof *p->par);
    p->order = malloc(cells * sizeof *p->order);
    p->depth = malloc(cells * sizeof *p->depth);
    p->stack = malloc(cells * sizeof *p->stack);
    p->sorted = malloc(cells * sizeof *p->sorted);
    p->new_id = calloc(cells, sizeof *p->new_id);
    if (!p->par || !p->order || !p->depth || !p->stack || !p->sorted || !p->new_id)
        return em_err_set(err, EM_ENOMEM, "import: out of memory");
    for (size_t j = 0; j < n; j++) {
        p->sorted[j].id = c->msgs[j].id;
        p->sorted[j].idx = j;
    }
    qsort(p->sorted, n, sizeof *p->sorted, cmp_id);
    for (size_t j = 1; j < n; j++)
        if (p->sorted[j].id == p->sorted[j - 1].id)
            return em_err_set(err, EM_EINVAL, "conversations[%zu].messages[%zu].id: %lld is also messages[%zu]'s",
                              ci, p->sorted[j].idx, (long long)p->sorted[j].id, p->sorted[j - 1].idx);
    for (size_t j = 0; j < n; j++) {
        int64_t pid = c->msgs[j].parent_id;
        p->par[j] = pid ? find(p->sorted, n, pid) : NONE;
        if (pid && p->par[j] == NONE)
            return em_err_set(err, EM_EINVAL,
                              "conversations[%zu].messages[%zu].parent_id: %lld is not a message of this conversation",
                              ci, j, (long long)pid);
    }
    /* The order: as given, except that a message's ancestors not placed yet
     * go just before it (top first). Walking up from each message finds
     * them; state in depth: NONE = not placed, NONE - 1 = on the current
     * walk (met again: a cycle), else its depth. An export (by id, parents
     * first) keeps its order, so the new ids keep the old ones' order. */
    for (size_t j = 0; j < n; j++)
        p->depth[j] = NONE;
    for (size_t j = 0, placed = 0; j < n; j++) {
        size_t sp = 0, k = j;
        while (k != NONE && p->depth[k] == NONE) {
            p->depth[k] = NONE - 1;
            p->stack[sp++] = k;
            k = p->par[k];
        }
        if (k != NONE && p->depth[k] == NONE - 1)
            return em_err_set(err, EM_EINVAL,
                              "conversations[%zu].messages[%zu].parent_id: a cycle (a message is its own ancestor)",
                              ci, k);
        size_t d = k == NONE ? 0 : p->depth[k] + 1;
        while (sp) {
            size_t x = p->stack[--sp];
            p->depth[x] = d++;
            p->order[placed++] = x;
        }
    }
    if (c->current_leaf_id) {
        p->leaf = find(p->sorted, n, c->current_leaf_id);
        if (p->leaf == NONE)
            return em_err_set(err, EM_EINVAL, "conversations[%zu].current_leaf_id: %lld is not a message of this conversation",
                              ci, (long long)c->current_leaf_id);
    }
    return 0;
}

static int check_conv(const em_conv_in *c, size_t ci, em_err *err)
{
    char what[64];
    snprintf(what, sizeof what, "conversations[%zu].title", ci);
    int ret = em_sto_title_check(c->title, what, err);
    if (ret)
        return ret;
    if (c->created_ms < 0 || c->updated_ms < 0 || c->current_leaf_id < 0)
        return em_err_set(err, EM_EINVAL, "conversations[%zu]: created_ms, updated_ms and current_leaf_id must not be negative", ci);
    if (c->n_msgs && !c->msgs)
        return em_err_set(err, EM_EINVAL, "conversations[%zu].messages: missing", ci);
    return 0;
}

/* Write conversation c as planned by p; *id gets its new id. */
static int write_conv(em_storage *st, int64_t key_id, const em_conv_in *c, plan_t *p, int64_t now,
                      int64_t *id, int *rc, em_err *err)
{
    int ret = 0;
    sqlite3_stmt *s = em_sto_prep(st, EM_STMT_CONV_IMPORT,
                                  "INSERT INTO conversations (key_id, title, created_ms, updated_ms)"
                                  " VALUES (?1, ?2, ?3, ?4)",
                                  &ret, err);
    if (!s)
        return ret;
    em_sto_bind_key(s, 1, key_id);
    if (c->title)
        sqlite3_bind_text(s, 2, c->title, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, c->created_ms);
    sqlite3_bind_int64(s, 4, c->updated_ms ? c->updated_ms : now);
    if ((ret = em_sto_step_done(st, s, rc, "importing a conversation", err)))
        return ret;
    *id = sqlite3_last_insert_rowid(st->ops.db);
    for (size_t k = 0; k < c->n_msgs; k++) {
        size_t j = p->order[k];
        const em_message_in *m = &c->msgs[j];
        em_message_new nm = { .role = m->role, .content = m->content, .tokens = m->tokens,
                              .finish_reason = m->finish_reason };
        int64_t parent = p->par[j] == NONE ? 0 : p->new_id[p->par[j]];
        if ((ret = em_sto_message_insert(st, *id, parent, &nm, m->created_ms, &p->new_id[j], rc, err)))
            return ret;
    }
    if (p->leaf != NONE)
        ret = em_sto_set_leaf(st, *id, p->new_id[p->leaf], rc, err);
    return ret;
}

int em_storage_conv_import(em_storage *st, int64_t key_id, const em_conv_in *convs, size_t n,
                           int64_t *ids, em_err *err)
{
    int ret = 0, rc = SQLITE_OK;
    for (size_t i = 0; i < n; i++)
        ids[i] = 0;
    if (!st->opts.store_content)
        return em_sto_content_off(st, err);
    for (size_t i = 0; i < n; i++)
        if ((ret = check_conv(&convs[i], i, err)))
            return ret;
    if ((ret = em_sto_ops_begin(st, err)))
        return ret;
    if ((ret = em_sto_txn(st, EM_STMT_OPS_BEGIN, &rc, err)))
        goto done;
    int64_t now = em_storage_now_ms();
    for (size_t i = 0; i < n && !ret; i++) {
        plan_t p;
        ret = plan_make(&convs[i], i, &p, err);
        if (!ret)
            ret = write_conv(st, key_id, &convs[i], &p, now, &ids[i], &rc, err);
        plan_free(&p);
    }
    if (!ret)
        ret = em_sto_txn(st, EM_STMT_OPS_COMMIT, &rc, err);
done:
    if (ret) {
        em_sto_txn_abort(st);
        for (size_t i = 0; i < n; i++)
            ids[i] = 0;
    }
    em_sto_ops_end(st, rc);
    return ret;
}
