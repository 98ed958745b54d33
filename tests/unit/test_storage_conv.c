/* test_storage_conv.c — unit tests of the conversation tree in storage/:
 * messages under a given parent (regenerated answers and edited messages as
 * siblings), the path root -> leaf, switching the current leaf, rename,
 * title search (case-insensitive, Unicode, literal), per-key isolation of
 * every call, the database's own guards (parent in the same conversation,
 * parent before child, the leaf's conversation), export, import (a round
 * trip gives an equal tree under new ids; hostile trees are refused and
 * leave nothing behind), and the content switch. Real SQLite files in a
 * temporary directory. */
#include "tests/unit/storage_test.h"

static em_storage *open_at(const char *path, int store_content)
{
    em_storage_opts o;
    em_storage_opts_init(&o);
    o.store_content = store_content;
    return t_open_at(path, &o);
}

/* "role:content" of each message of a path, joined by '|'. */
static void path_text(em_storage *st, int64_t key, int64_t conv, int64_t leaf, char *out, size_t cap)
{
    em_message *m = NULL;
    size_t n = 0, at = 0;
    out[0] = 0;
    em_err err = { 0 };
    if (em_storage_message_path(st, key, conv, leaf, 0, &m, &n, &err)) {
        snprintf(out, cap, "error: %s", err.msg);
        return;
    }
    for (size_t i = 0; i < n && at < cap; i++) {
        at += (size_t)snprintf(out + at, cap - at, "%s%s:%s", i ? "|" : "", m[i].role, m[i].content);
        if (i && m[i].parent_id != m[i - 1].id)
            snprintf(out, cap, "error: messages[%zu] is not under messages[%zu]", i, i - 1);
    }
    em_storage_messages_free(m, n);
}

/* sql is refused (quietly: the refusal is the point). */
static int refused(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK;
}

static int64_t n_rows(sqlite3 *db, const char *table)
{
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    return t_int(db, sql);
}

static int test_branches(const char *path, int64_t ka, int64_t kb)
{
    em_storage *st = open_at(path, 1);
    REQUIRE(st);
    em_err err = { 0 };
    char got[1024];
    int64_t conv = 0, other = 0, theirs = 0, ids[3] = { 0 };
    CHECK_RC(em_storage_conv_create(st, ka, "branches", &conv, &err), 0);
    CHECK_RC(em_storage_conv_create(st, ka, "other", &other, &err), 0);
    CHECK_RC(em_storage_conv_create(st, kb, "theirs", &theirs, &err), 0);
    CHECK_RC(em_storage_message_add(st, ka, other, "user", "elsewhere", 0, NULL, &err), 0);

    /* the first exchange, under no parent */
    em_message_new first[] = { { "system", "Be brief.", 0, NULL }, { "user", "q1", 0, NULL },
                               { "assistant", "a1", 5, "stop" } };
    CHECK_RC(em_storage_message_append(st, ka, conv, EM_STORAGE_ROOT, first, 3, ids, &err), 0);
    int64_t sys = ids[0], q1 = ids[1], a1 = ids[2];
    CHECK(sys > 0 && q1 > sys && a1 > q1);
    /* regenerate: a second answer to q1, a sibling of a1 */
    em_message_new regen = { "assistant", "a1 again", 7, "length" };
    int64_t a1b = 0;
    CHECK_RC(em_storage_message_append(st, ka, conv, q1, &regen, 1, &a1b, &err), 0);
    /* edit: q1 rewritten under its parent, with its own answer (stopped) */
    em_message_new edit[] = { { "user", "q1 edited", 0, NULL }, { "assistant", "a2 cut", 2, "cancelled" } };
    CHECK_RC(em_storage_message_append(st, ka, conv, sys, edit, 2, ids, &err), 0);
    int64_t q1e = ids[0], a2 = ids[1];

    em_message *m = NULL;
    size_t n = 0;
    CHECK_RC(em_storage_message_list(st, ka, conv, &m, &n, &err), 0);
    CHECK(n == 6);
    if (n == 6) {
        CHECK(m[0].id == sys && m[0].parent_id == 0 && !m[0].finish_reason[0]);
        CHECK(m[1].id == q1 && m[1].parent_id == sys);
        CHECK(m[2].id == a1 && m[2].parent_id == q1 && strcmp(m[2].finish_reason, "stop") == 0 && m[2].tokens == 5);
        CHECK(m[3].id == a1b && m[3].parent_id == q1 && strcmp(m[3].finish_reason, "length") == 0);
        CHECK(m[4].id == q1e && m[4].parent_id == sys);
        CHECK(m[5].id == a2 && m[5].parent_id == q1e && strcmp(m[5].finish_reason, "cancelled") == 0);
    }
    em_storage_messages_free(m, n);

    /* the newest message added is the current leaf */
    em_conv_info ci;
    CHECK_RC(em_storage_conv_get(st, ka, conv, &ci, &err), 0);
    CHECK(ci.current_leaf_id == a2 && ci.n_messages == 6 && strcmp(ci.title, "branches") == 0);
    path_text(st, ka, conv, EM_STORAGE_LEAF, got, sizeof got);
    CHECK(strcmp(got, "system:Be brief.|user:q1 edited|assistant:a2 cut") == 0);
    path_text(st, ka, conv, a1b, got, sizeof got);
    CHECK(strcmp(got, "system:Be brief.|user:q1|assistant:a1 again") == 0);
    path_text(st, ka, conv, EM_STORAGE_ROOT, got, sizeof got);
    CHECK(strcmp(got, "") == 0);

    /* switch to the first answer's branch; a message without a parent
     * continues from there */
    CHECK_RC(em_storage_conv_update(st, ka, conv, NULL, a1, &err), 0);
    CHECK_RC(em_storage_conv_get(st, ka, conv, &ci, &err), 0);
    CHECK(ci.current_leaf_id == a1);
    path_text(st, ka, conv, EM_STORAGE_LEAF, got, sizeof got);
    CHECK(strcmp(got, "system:Be brief.|user:q1|assistant:a1") == 0);
    int64_t q2 = 0;
    CHECK_RC(em_storage_message_add(st, ka, conv, "user", "q2", 0, &q2, &err), 0);
    path_text(st, ka, conv, EM_STORAGE_LEAF, got, sizeof got);
    CHECK(strcmp(got, "system:Be brief.|user:q1|assistant:a1|user:q2") == 0);
    /* a bound on the path: 4 messages pass max 4, not max 3 (nothing read) */
    CHECK_RC(em_storage_message_path(st, ka, conv, EM_STORAGE_LEAF, 4, &m, &n, &err), 0);
    CHECK(n == 4 && strcmp(m[3].content, "q2") == 0);
    em_storage_messages_free(m, n);
    m = NULL;
    n = 7;
    CHECK_RC(em_storage_message_path(st, ka, conv, EM_STORAGE_LEAF, 3, &m, &n, &err), EM_ERANGE);
    CHECK(m == NULL && n == 0 && strstr(err.msg, "longer than 3 messages"));
    /* a second first message (editing the first one) */
    int64_t root2 = 0;
    em_message_new r2 = { "user", "another start", 0, NULL };
    CHECK_RC(em_storage_message_append(st, ka, conv, EM_STORAGE_ROOT, &r2, 1, &root2, &err), 0);
    path_text(st, ka, conv, EM_STORAGE_LEAF, got, sizeof got);
    CHECK(strcmp(got, "user:another start") == 0);

    /* refused: another conversation's or another key's message, bad fields */
    int64_t x = 0;
    em_message_new u = { "user", "x", 0, NULL };
    CHECK_RC(em_storage_message_append(st, ka, conv, 999999, &u, 1, &x, NULL), EM_ENOENT);
    CHECK_RC(em_storage_message_append(st, ka, other, q1, &u, 1, &x, NULL), EM_ENOENT);
    CHECK_RC(em_storage_message_append(st, kb, conv, q1, &u, 1, &x, NULL), EM_ENOENT);
    CHECK_RC(em_storage_message_append(st, kb, theirs, q1, &u, 1, &x, NULL), EM_ENOENT);
    CHECK(x == 0);
    em_message_new bad1 = { "user", "x", 0, "stop" }, bad2 = { "assistant", "x", 0, "eos" };
    CHECK_RC(em_storage_message_append(st, ka, conv, q1, &bad1, 1, NULL, NULL), EM_EINVAL);
    CHECK_RC(em_storage_message_append(st, ka, conv, q1, &bad2, 1, NULL, NULL), EM_EINVAL);
    CHECK_RC(em_storage_message_append(st, ka, conv, q1, &u, 0, NULL, NULL), EM_EINVAL);
    CHECK_RC(em_storage_message_path(st, ka, other, a1, 0, &m, &n, NULL), EM_ENOENT);
    CHECK_RC(em_storage_message_path(st, kb, conv, a1, 0, &m, &n, NULL), EM_ENOENT);
    CHECK_RC(em_storage_message_list(st, kb, conv, &m, &n, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_get(st, kb, conv, &ci, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_update(st, kb, conv, "mine now", 0, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_update(st, kb, conv, NULL, a1, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_update(st, ka, other, NULL, a1, NULL), EM_EINVAL);   /* not its message */
    CHECK_RC(em_storage_conv_update(st, ka, conv, NULL, -3, NULL), EM_EINVAL);

    /* rename: kept as given, byte for byte; both changes or neither */
    const char *hostile = "<img src=x onerror=alert(1)> <script>alert('\xc3\xa9')</script> \"&amp;\"\n";
    CHECK_RC(em_storage_conv_update(st, ka, conv, hostile, q2, &err), 0);
    CHECK_RC(em_storage_conv_get(st, ka, conv, &ci, &err), 0);
    CHECK(strcmp(ci.title, hostile) == 0 && ci.current_leaf_id == q2);
    CHECK_RC(em_storage_conv_update(st, ka, conv, "not applied", 999999, NULL), EM_EINVAL);
    CHECK_RC(em_storage_conv_update(st, ka, conv, "", 0, NULL), EM_EINVAL);
    char longt[EM_STORAGE_TITLE_MAX + 2];
    memset(longt, 'x', sizeof longt - 1);
    longt[sizeof longt - 1] = 0;
    CHECK_RC(em_storage_conv_update(st, ka, conv, longt, 0, NULL), EM_EINVAL);
    longt[EM_STORAGE_TITLE_MAX] = 0;
    CHECK_RC(em_storage_conv_update(st, ka, other, longt, 0, &err), 0);
    CHECK_RC(em_storage_conv_get(st, ka, conv, &ci, &err), 0);
    CHECK(strcmp(ci.title, hostile) == 0 && ci.current_leaf_id == q2);
    CHECK_RC(em_storage_conv_get(st, ka, other, &ci, &err), 0);
    CHECK(strcmp(ci.title, longt) == 0);

    /* the database guards the tree itself */
    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    char sql[256];
    t_exec(db, "PRAGMA foreign_keys = ON");
    snprintf(sql, sizeof sql, "INSERT INTO messages (conversation_id, parent_id, role, content, created_ms)"
             " VALUES (%lld, %lld, 'user', 'cross', 1)", (long long)other, (long long)q1);
    CHECK(refused(db, sql));   /* a parent in another conversation */
    snprintf(sql, sizeof sql, "INSERT INTO messages (id, conversation_id, parent_id, role, content, created_ms)"
             " VALUES (-5, %lld, %lld, 'user', 'earlier', 1)", (long long)conv, (long long)q1);
    CHECK(refused(db, sql));   /* a parent after its child */
    snprintf(sql, sizeof sql, "UPDATE conversations SET current_leaf_id = %lld WHERE id = %lld", (long long)q1,
             (long long)other);
    CHECK(refused(db, sql));   /* another conversation's leaf */
    CHECK(refused(db, "UPDATE messages SET finish_reason = 'stop' WHERE role = 'user'"));
    CHECK(t_int(db, "SELECT count(*) FROM pragma_foreign_key_check") == 0);

    /* deleting a conversation takes its whole tree */
    int64_t before = n_rows(db, "messages");
    CHECK_RC(em_storage_conv_delete(st, kb, conv, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_delete(st, ka, conv, &err), 0);
    CHECK(n_rows(db, "messages") == before - 8);
    sqlite3_close(db);
    em_storage_close(st);
    return 0;
}

static int count_titles(em_storage *st, int64_t key, const char *q, int *ret)
{
    em_conv_info *v = NULL;
    size_t n = 0;
    *ret = em_storage_conv_search(st, key, q, &v, &n, NULL);
    free(v);
    return (int)n;
}

static int test_search(const char *path, int64_t ka, int64_t kb)
{
    em_storage *st = open_at(path, 1);
    REQUIRE(st);
    em_err err = { 0 };
    int64_t id = 0;
    const char *titles[] = { "\xc3\x89t\xc3\xa9 \xc3\xa0 PARIS", "paris trip", "100% sure", "under_score", NULL };
    for (int i = 0; titles[i]; i++)
        CHECK_RC(em_storage_conv_create(st, ka, titles[i], &id, &err), 0);
    CHECK_RC(em_storage_conv_create(st, ka, NULL, &id, &err), 0);
    CHECK_RC(em_storage_conv_create(st, kb, "Paris for b", &id, &err), 0);
    int ret, all = count_titles(st, ka, NULL, &ret);
    CHECK(ret == 0 && all >= 5);
    CHECK(count_titles(st, ka, "", &ret) == all && ret == 0);
    CHECK(count_titles(st, ka, "paris", &ret) == 2 && ret == 0);
    CHECK(count_titles(st, ka, "PaRiS", &ret) == 2 && ret == 0);
    CHECK(count_titles(st, ka, "\xc3\xa9t\xc3\xa9", &ret) == 1 && ret == 0);   /* été finds Été */
    CHECK(count_titles(st, ka, "\xc3\x80 p", &ret) == 1 && ret == 0);          /* À p finds à P */
    CHECK(count_titles(st, ka, "%", &ret) == 1 && ret == 0);                   /* literal, not LIKE */
    CHECK(count_titles(st, ka, "_", &ret) == 1 && ret == 0);
    CHECK(count_titles(st, ka, ".*", &ret) == 0 && ret == 0);                  /* not a regex */
    CHECK(count_titles(st, ka, "nowhere", &ret) == 0 && ret == 0);
    CHECK(count_titles(st, kb, "paris", &ret) == 1 && ret == 0);               /* per key */
    count_titles(st, ka, "\xff", &ret);
    CHECK(ret == EM_EINVAL);
    em_storage_close(st);
    return 0;
}

/* An import that mirrors an export: source ids are the exported ones. */
typedef struct {
    em_conv_in     *convs;
    em_message_in  *msgs;
} import_doc;

static int doc_from(const em_conv_full *v, size_t n, import_doc *d)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += v[i].n_msgs;
    d->convs = calloc(n ? n : 1, sizeof *d->convs);
    d->msgs = calloc(total ? total : 1, sizeof *d->msgs);
    if (!d->convs || !d->msgs)
        return -1;
    for (size_t i = 0, at = 0; i < n; i++) {
        em_conv_in *c = &d->convs[i];
        c->title = v[i].info.title[0] ? v[i].info.title : NULL;
        c->created_ms = v[i].info.created_ms;
        c->current_leaf_id = v[i].info.current_leaf_id;
        c->msgs = &d->msgs[at];
        c->n_msgs = v[i].n_msgs;
        for (size_t j = 0; j < v[i].n_msgs; j++, at++) {
            const em_message *m = &v[i].msgs[j];
            d->msgs[at] = (em_message_in){ m->id, m->parent_id, m->role, m->content,
                                           m->finish_reason[0] ? m->finish_reason : NULL, m->tokens,
                                           m->created_ms };
        }
    }
    return 0;
}

/* Position of id among v's messages (the tree's shape, id-free), or -1. */
static long pos_of(const em_conv_full *v, int64_t id)
{
    for (size_t j = 0; j < v->n_msgs; j++)
        if (v->msgs[j].id == id)
            return (long)j;
    return -1;
}

/* The same tree: titles, roles, contents, tokens, finish reasons, times,
 * parents and current leaf by position (ids may differ). */
static int same_tree(const em_conv_full *a, const em_conv_full *b)
{
    if (strcmp(a->info.title, b->info.title) || a->n_msgs != b->n_msgs || a->info.created_ms != b->info.created_ms ||
        pos_of(a, a->info.current_leaf_id) != pos_of(b, b->info.current_leaf_id))
        return 0;
    for (size_t j = 0; j < a->n_msgs; j++) {
        const em_message *x = &a->msgs[j], *y = &b->msgs[j];
        if (strcmp(x->role, y->role) || strcmp(x->content, y->content) || x->tokens != y->tokens ||
            strcmp(x->finish_reason, y->finish_reason) || x->created_ms != y->created_ms ||
            (x->parent_id ? pos_of(a, x->parent_id) : -1) != (y->parent_id ? pos_of(b, y->parent_id) : -1))
            return 0;
    }
    return 1;
}

static int test_import(const char *path, int64_t ka, int64_t kb)
{
    em_storage *st = open_at(path, 1);
    REQUIRE(st);
    sqlite3 *db = t_db_open(path);
    REQUIRE(db);
    em_err err = { 0 };
    /* a tree with two branches and a leaf that is not the newest message */
    int64_t conv = 0, ids[3], extra = 0;
    CHECK_RC(em_storage_conv_create(st, ka, "<script>alert(1)</script> tree", &conv, &err), 0);
    em_message_new chain[] = { { "user", "q", 0, NULL }, { "assistant", "a", 3, "stop" }, { "user", "q2", 0, NULL } };
    CHECK_RC(em_storage_message_append(st, ka, conv, EM_STORAGE_ROOT, chain, 3, ids, &err), 0);
    em_message_new sib = { "assistant", "a'", 4, "cancelled" };
    CHECK_RC(em_storage_message_append(st, ka, conv, ids[0], &sib, 1, &extra, &err), 0);
    CHECK_RC(em_storage_conv_update(st, ka, conv, NULL, ids[2], &err), 0);
    int64_t empty = 0;
    CHECK_RC(em_storage_conv_create(st, ka, NULL, &empty, &err), 0);

    em_conv_full *one = NULL, *all = NULL, *again = NULL;
    size_t n_one = 0, n_all = 0, n_again = 0;
    CHECK_RC(em_storage_conv_export(st, ka, conv, &one, &n_one, &err), 0);
    REQUIRE(n_one == 1 && one[0].n_msgs == 4 && one[0].info.current_leaf_id == ids[2]);
    CHECK_RC(em_storage_conv_export(st, kb, conv, &again, &n_again, NULL), EM_ENOENT);
    CHECK_RC(em_storage_conv_export(st, ka, 0, &all, &n_all, &err), 0);
    CHECK(n_all >= 2 && all[0].info.id == empty && all[1].info.id == conv);   /* newest first */

    /* round trip, into another key: new ids, the same trees */
    import_doc d;
    REQUIRE(doc_from(all, 2, &d) == 0);
    int64_t new_ids[2] = { 0 };
    int64_t convs_before = n_rows(db, "conversations");
    CHECK_RC(em_storage_conv_import(st, kb, d.convs, 2, new_ids, &err), 0);
    CHECK(n_rows(db, "conversations") == convs_before + 2);
    CHECK(new_ids[0] > conv && new_ids[1] > new_ids[0]);
    for (int i = 0; i < 2; i++) {
        CHECK_RC(em_storage_conv_export(st, kb, new_ids[i], &again, &n_again, &err), 0);
        CHECK(n_again == 1 && same_tree(&all[i], &again[0]));
        if (n_again == 1 && again[0].n_msgs)
            CHECK(again[0].msgs[0].id != all[i].msgs[0].id);
        em_storage_conv_full_free(again, n_again);
        again = NULL;
    }
    CHECK_RC(em_storage_conv_export(st, ka, new_ids[0], &again, &n_again, NULL), EM_ENOENT);

    /* out of order and with gaps: children first, ids as strangers chose them */
    em_message_in shuffled[] = {
        { 30, 20, "assistant", "answer", "stop", 1, 5 },
        { 20, 10, "user", "question", NULL, 0, 4 },
        { 31, 20, "assistant", "second answer", NULL, 1, 6 },
        { 10, 0, "system", "sys", NULL, 0, 3 },
    };
    em_conv_in sc = { "shuffled", 7, 0, 30, shuffled, 4 };
    int64_t sid = 0;
    CHECK_RC(em_storage_conv_import(st, ka, &sc, 1, &sid, &err), 0);
    char got[256];
    path_text(st, ka, sid, EM_STORAGE_LEAF, got, sizeof got);
    CHECK(strcmp(got, "system:sys|user:question|assistant:answer") == 0);
    em_message *m = NULL;
    size_t n = 0;
    CHECK_RC(em_storage_message_list(st, ka, sid, &m, &n, &err), 0);
    CHECK(n == 4 && strcmp(m[2].content, "answer") == 0 && strcmp(m[3].content, "second answer") == 0);
    em_storage_messages_free(m, n);

    /* hostile: each refused with the place named, nothing created */
    int64_t msgs_before = n_rows(db, "messages");
    convs_before = n_rows(db, "conversations");
    em_message_in cycle[] = { { 1, 2, "user", "a", NULL, 0, 0 }, { 2, 1, "assistant", "b", NULL, 0, 0 } };
    em_message_in self[] = { { 1, 1, "user", "a", NULL, 0, 0 } };
    em_message_in dup[] = { { 1, 0, "user", "a", NULL, 0, 0 }, { 1, 0, "user", "b", NULL, 0, 0 } };
    em_message_in orphan[] = { { 1, 0, "user", "a", NULL, 0, 0 }, { 2, 9, "assistant", "b", NULL, 0, 0 } };
    em_message_in badrole[] = { { 1, 0, "tool", "a", NULL, 0, 0 } };
    em_message_in nocontent[] = { { 1, 0, "user", NULL, NULL, 0, 0 } };
    em_message_in badfinish[] = { { 1, 0, "user", "a", "stop", 0, 0 } };
    em_message_in zero[] = { { 0, 0, "user", "a", NULL, 0, 0 } };
    em_message_in good[] = { { 1, 0, "user", "fine", NULL, 0, 0 } };
    /* the second conversation names a message of the first as its parent */
    em_message_in across[] = { { 2, 1, "assistant", "elsewhere", NULL, 0, 0 } };
    struct {
        em_conv_in c[2];
        size_t n;
        const char *want;
    } cases[] = {
        { { { "c", 0, 0, 0, cycle, 2 } }, 1, "conversations[0].messages[0].parent_id: a cycle" },
        { { { "c", 0, 0, 0, self, 1 } }, 1, "conversations[0].messages[0].parent_id: a cycle" },
        { { { "c", 0, 0, 0, dup, 2 } }, 1, "conversations[0].messages[1].id" },
        { { { "c", 0, 0, 0, orphan, 2 } }, 1, "conversations[0].messages[1].parent_id: 9 is not" },
        { { { "c", 0, 0, 0, badrole, 1 } }, 1, "conversations[0].messages[0]: role" },
        { { { "c", 0, 0, 0, nocontent, 1 } }, 1, "conversations[0].messages[0]: no text" },
        { { { "c", 0, 0, 0, badfinish, 1 } }, 1, "conversations[0].messages[0]: only an assistant" },
        { { { "c", 0, 0, 0, zero, 1 } }, 1, "conversations[0].messages[0].id" },
        { { { "c", 0, 0, 7, good, 1 } }, 1, "conversations[0].current_leaf_id: 7 is not" },
        { { { "", 0, 0, 0, good, 1 } }, 1, "conversations[0].title" },
        { { { "ok", 0, 0, 0, good, 1 }, { "c", 0, 0, 0, across, 1 } }, 2,
          "conversations[1].messages[0].parent_id: 1 is not" },
        { { { "ok", 0, 0, 0, good, 1 }, { "c", -1, 0, 0, good, 1 } }, 2, "conversations[1]: created_ms" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t out[2] = { -1, -1 };
        em_err e = { 0 };
        CHECK_RC(em_storage_conv_import(st, ka, cases[i].c, cases[i].n, out, &e), EM_EINVAL);
        if (!strstr(e.msg, cases[i].want))
            fprintf(stderr, "case %zu: '%s' does not say '%s'\n", i, e.msg, cases[i].want);
        CHECK(strstr(e.msg, cases[i].want) != NULL);
        CHECK(out[0] == 0);
    }
    CHECK(n_rows(db, "conversations") == convs_before && n_rows(db, "messages") == msgs_before);
    em_storage_conv_full_free(one, n_one);
    em_storage_conv_full_free(all, n_all);
    free(d.convs);
    free(d.msgs);
    sqlite3_close(db);
    em_storage_close(st);

    /* content switched off: no import, no new messages */
    st = open_at(path, 0);
    REQUIRE(st);
    int64_t out = 0;
    CHECK_RC(em_storage_conv_import(st, ka, &sc, 1, &out, NULL), EM_ESTATE);
    em_message_new u = { "user", "secret", 0, NULL };
    CHECK_RC(em_storage_message_append(st, ka, sid, EM_STORAGE_LEAF, &u, 1, NULL, NULL), EM_ESTATE);
    em_storage_close(st);
    return 0;
}

int main(void)
{
    if (t_mkdtemp("storage-conv"))
        return 1;
    char path[512];
    t_path(path, sizeof path, "conv.db");
    em_storage *st = open_at(path, 1);
    if (!st)
        return 1;
    char key[EM_STORAGE_KEY_MAX];
    em_key_info a, b;
    em_err err = { 0 };
    if (em_storage_key_add(st, "a", EM_USAGE_INTERACTIVE, 0, key, sizeof key, &a, &err) ||
        em_storage_key_add(st, "b", EM_USAGE_INTERACTIVE, 0, key, sizeof key, &b, &err)) {
        fprintf(stderr, "keys: %s\n", err.msg);
        return 1;
    }
    em_storage_close(st);
    struct {
        const char *name;
        int (*fn)(const char *, int64_t, int64_t);
    } tests[] = {
        { "branches", test_branches },
        { "search", test_search },
        { "import", test_import },
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        int before = test_failures;
        if (tests[i].fn(path, a.id, b.id))
            test_failures++;
        printf("%s %s\n", test_failures == before ? "ok  " : "FAIL", tests[i].name);
    }
    /* key 0 (no key) is a key of its own */
    int before = test_failures;
    if (test_branches(path, 0, a.id))
        test_failures++;
    printf("%s branches (no key)\n", test_failures == before ? "ok  " : "FAIL");
    return test_summary("storage-conv");
}
