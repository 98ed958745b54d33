/* cmd_quantize.c — `ember quantize IN.gguf OUT.gguf TYPE`: convert an F32,
 * F16 or BF16 model (or a quantized one, with a warning) to Q8_0, Q6_K,
 * Q5_K_M, Q4_K_M or Q4_0 on the box (core/model/quantize.h does the work).
 *
 * The output is written to OUT.tmp.<pid>, flushed to disk and renamed over
 * OUT only when complete: an interrupted or failed run never leaves a broken
 * OUT. SIGINT/SIGTERM/SIGHUP stop the conversion between pieces and remove
 * the temporary file. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/model/gguf.h"
#include "core/model/quantize.h"
#include "firmware/cli.h"

static const char usage[] =
    "usage: ember quantize IN.gguf OUT.gguf TYPE [--threads N]\n"
    "  Quantizes an F32/F16/BF16 GGUF model. TYPE is one of:\n"
    "    Q8_0    8.5 bits/weight, indistinguishable from F16 in practice\n"
    "    Q6_K    6.6 bits/weight, near-lossless\n"
    "    Q5_K_M  ~5.7 bits/weight\n"
    "    Q4_K_M  ~4.8 bits/weight, the usual size/quality compromise\n"
    "    Q4_0    4.5 bits/weight, lower quality than Q4_K_M\n"
    "  Norms and biases stay F32. OUT appears only when complete.\n"
    "  Measure what a type costs on your own text: ember perplexity --report.\n"
    "  --threads N  worker threads (default: one per CPU)\n";

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static int is_interrupted(void *ctx)
{
    (void)ctx;
    return interrupted != 0;
}

typedef struct {
    int    tty;
    int    last_pct;
    double last_t;
} bar;

static void progress(void *ctx, uint64_t done, uint64_t total, const char *tensor)
{
    bar *b = ctx;
    if (!b->tty || total == 0)
        return;
    int pct = (int)(done * 100 / total);
    double now = em_cli_now();
    if (pct == b->last_pct && now - b->last_t < 0.2 && done < total)
        return;
    b->last_pct = pct;
    b->last_t = now;
    char fill[31];
    int k = pct * 30 / 100;
    for (int i = 0; i < 30; i++)
        fill[i] = i < k ? '#' : '.';
    fill[30] = 0;
    char name[41];   /* a tensor name from the file: no control bytes on the terminal, and
                      * cut by em_err_escape (never inside an escape) to the 40 columns shown */
    snprintf(name, sizeof name, "%s", tensor);
    em_err_escape(name, sizeof name);
    fprintf(stderr, "\r[%s] %3d%% %-40.40s", fill, pct, name);
    fflush(stderr);
}

/* Print the one warning about inputs that are quantized already. */
static void warn_requant(const em_gguf *g, const uint32_t *types)
{
    uint32_t n = 0, seen[EM_T_COUNT] = { 0 };
    char list[128] = "";
    for (size_t i = 0; i < em_gguf_n_tensors(g); i++) {
        uint32_t t = em_gguf_tensor_at(g, i)->type;
        if (types[i] == t || t == EM_T_F32 || t == EM_T_F16 || t == EM_T_BF16)
            continue;
        n++;
        if (!seen[t]++ && strlen(list) + 12 < sizeof list)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? " " : "",
                     em_ttype_name(t));
    }
    if (n)
        em_cli_note("quantize: warning: %u tensors of %s are already quantized (%s): they are "
                    "dequantized and quantized again, which loses more than quantizing the F16/F32 original",
                    n, em_gguf_path(g), list);
}

/* fsync the directory holding path, so that the rename is on disk too. */
static void sync_dir(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = 0;
    else if (slash)
        *slash = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int em_cmd_quantize(int argc, char **argv)
{
    long threads = 0;
    em_cli_opt opts[] = {
        { "--threads", "-t", EM_OPT_INT, &threads, 1, 64 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    const char *pos[3];
    int n_pos = 0;
    int rc = em_cli_parse("quantize", argc, argv, opts, pos, 3, &n_pos, usage);
    if (rc)
        return rc;
    if (n_pos != 3)
        return em_cli_fail(2, "quantize: expected IN.gguf OUT.gguf TYPE (see ember quantize --help)");
    const char *in_path = pos[0], *out_path = pos[1];
    const em_qftype *ft = em_qftype_find(pos[2]);
    if (!ft)
        return em_cli_fail(2, "quantize: '%s' is not an output type (%s)", pos[2], em_qftype_names());

    em_err err = { 0 };
    em_gguf *g = NULL;
    uint32_t *types = NULL;
    FILE *f = NULL;
    char tmp[4200] = "";
    int status = 0;
    struct sigaction sa, old_int, old_term, old_hup;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGHUP, &sa, &old_hup);

    struct stat si, so;
    if ((rc = em_gguf_open(in_path, &g, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    if ((rc = em_cli_check_out_path("quantize: OUT", out_path, &err))) {   /* before the work, not after */
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (stat(in_path, &si) == 0 && stat(out_path, &so) == 0 && si.st_dev == so.st_dev &&
        si.st_ino == so.st_ino) {
        status = em_cli_fail(2, "quantize: %s: the output would replace the input; choose another name", out_path);
        goto done;
    }
    types = malloc((em_gguf_n_tensors(g) + 1) * sizeof *types);
    if (!types) {
        status = em_cli_fail(1, "quantize: out of memory");
        goto done;
    }
    if ((rc = em_quantize_plan(g, ft, types, NULL, &err))) {
        status = em_cli_fail_err(&err);
        goto done;
    }
    warn_requant(g, types);

    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out_path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || !(f = fdopen(fd, "wb"))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        tmp[0] = 0;        /* nothing of ours to remove */
        status = em_cli_fail(e == ENOENT || e == ENOTDIR || e == EISDIR ? 2 : 1,
                             "quantize: %s: cannot create the output: %s", out_path, strerror(e));
        goto done;
    }
    bar b = { isatty(2), -1, 0 };
    em_quantize_opts qo = { (int)threads, progress, &b, is_interrupted, NULL };
    em_quantize_stats st;
    double t0 = em_cli_now();
    rc = em_quantize_gguf(g, ft, f, &qo, &st, &err);
    if (b.tty)
        fputc('\n', stderr);
    if (rc) {
        if (rc == EM_ECANCELED)
            em_err_set(&err, rc, "quantize: interrupted; %s was not written", out_path);
        status = em_cli_fail_err(&err);
        goto done;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        status = em_cli_fail(1, "quantize: %s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    int fc = fclose(f);
    f = NULL;
    if (fc != 0 || rename(tmp, out_path) != 0) {
        status = em_cli_fail(1, "quantize: %s: cannot complete the output: %s", out_path, strerror(errno));
        goto done;
    }
    tmp[0] = 0;
    sync_dir(out_path);

    double mib_in = (double)st.in_bytes / (1 << 20), mib_out = (double)st.out_bytes / (1 << 20);
    printf("%s: %s, %u tensors, %.2f MiB -> %.2f MiB (%.2f bits/weight) in %.1f s\n", out_path, ft->name,
           st.n_tensors, mib_in, mib_out, 8.0 * (double)st.out_bytes / (double)(st.n_params ? st.n_params : 1),
           em_cli_now() - t0);
    printf("tensor types:");
    for (uint32_t t = 0; t < EM_T_COUNT; t++)
        if (st.n_by_type[t])
            printf(" %s %u", em_ttype_name(t), st.n_by_type[t]);
    printf("\n");
    if (st.n_fallback)
        printf("%u tensors have rows that do not fit 256-element blocks and use a fallback type\n",
               st.n_fallback);
done:
    if (f)
        fclose(f);
    if (tmp[0])
        unlink(tmp);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGHUP, &old_hup, NULL);
    free(types);
    em_gguf_close(g);
    return status;
}
