/* cmd_tls_selfsigned.c — `ember tls-selfsigned`: a self-signed certificate
 * and its private key for a first install, so that `ember serve
 * --tls-cert --tls-key` can speak HTTPS and WSS at once: an ECDSA P-256 key
 * (mode 0600), an X.509 v3 certificate for it whose subjectAltName holds
 * localhost, this machine's host name, 127.0.0.1, ::1 and every --name
 * given (an IP address or a DNS name), valid for --days days. Browsers will
 * warn until the certificate is trusted (or replaced by one of the site's
 * own CA); docs/SECURITY.md says how. Files are never overwritten without
 * --force, and both are written beside themselves and renamed at the end. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "firmware/cli.h"

static const char usage[] =
    "usage: ember tls-selfsigned [--cert PATH] [--key PATH] [--name NAME]... [--days N] [--force]\n"
    "  Writes a self-signed certificate (--cert, default tls-cert.pem) and its ECDSA P-256\n"
    "  private key (--key, default tls-key.pem, mode 0600) for `ember serve --tls-cert PATH\n"
    "  --tls-key PATH`. The certificate names localhost, this machine's host name,\n"
    "  127.0.0.1 and ::1, and each --name (an IP address or a DNS name the box is reached\n"
    "  by; up to 16). --days: how long it is valid (1..3650, default 825). Existing files are\n"
    "  kept unless --force.\n";

/* Append "DNS:name" or "IP:addr" to the subjectAltName list. */
static int add_san(char *san, size_t cap, const char *name)
{
    unsigned char a[16];
    int ip = inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1;
    for (const char *p = name; *p; p++)
        if (!ip && !((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                     *p == '-' || *p == '.' || *p == '*'))
            return -1;
    size_t n = strlen(san);
    int w = snprintf(san + n, cap - n, "%s%s:%s", n ? "," : "", ip ? "IP" : "DNS", name);
    return w < 0 || (size_t)w >= cap - n ? -1 : 0;
}

/* Write the PEM of what (a key or a certificate) to path through path.tmp. */
static int write_pem(const char *path, mode_t mode, EVP_PKEY *key, X509 *cert)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return em_cli_fail(2, "tls-selfsigned: %s: the path is too long", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return em_cli_fail(1, "tls-selfsigned: %s: %s", tmp, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return em_cli_fail(1, "tls-selfsigned: %s: %s", tmp, strerror(errno));
    }
    int ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) : PEM_write_X509(f, cert);
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return em_cli_fail(1, "tls-selfsigned: %s: cannot write it: %s", path, e ? strerror(e) : "write error");
    }
    return 0;
}

int em_cmd_tls_selfsigned(int argc, char **argv)
{
    const char *cert_path = "tls-cert.pem", *key_path = "tls-key.pem";
    em_cli_list nl = { { NULL }, 0 };
    int force = 0;
    long days = 825;
    em_cli_opt opts[] = {
        { "--cert", NULL, EM_OPT_STR, &cert_path, 0, 0 },
        { "--key", NULL, EM_OPT_STR, &key_path, 0, 0 },
        { "--name", NULL, EM_OPT_MULTI, &nl, 0, 0 },
        { "--days", NULL, EM_OPT_INT, &days, 1, 3650 },
        { "--force", NULL, EM_OPT_FLAG, &force, 0, 0 },
        { NULL, NULL, 0, NULL, 0, 0 },
    };
    int rc = em_cli_parse("tls-selfsigned", argc, argv, opts, NULL, 0, NULL, usage);
    if (rc)
        return rc;
    const char *const *names = nl.vals;
    int n_names = nl.n;
    if (!strcmp(cert_path, key_path))
        return em_cli_fail(2, "tls-selfsigned: --cert and --key must be different files");
    struct stat sb;
    if (!force && (stat(cert_path, &sb) == 0 || stat(key_path, &sb) == 0))
        return em_cli_fail(1, "tls-selfsigned: %s exists: kept (--force replaces it)",
                           stat(cert_path, &sb) == 0 ? cert_path : key_path);

    char host[256] = "", san[4096] = "";
    if (gethostname(host, sizeof host) != 0)
        host[0] = 0;
    host[sizeof host - 1] = 0;
    if (add_san(san, sizeof san, "localhost") || (host[0] && strcmp(host, "localhost") &&
                                                  add_san(san, sizeof san, host)) ||
        add_san(san, sizeof san, "127.0.0.1") || add_san(san, sizeof san, "::1"))
        return em_cli_fail(1, "tls-selfsigned: this machine's host name '%s' is not a DNS name", host);
    for (int i = 0; i < n_names; i++)
        if (add_san(san, sizeof san, names[i]))
            return em_cli_fail(2, "tls-selfsigned: --name '%s' is not an IP address or a DNS name", names[i]);

    int status = 1;
    EVP_PKEY *key = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    X509_EXTENSION *ext = NULL;
    if (!key || !x)
        goto fail;
    unsigned char serial[16];
    FILE *ur = fopen("/dev/urandom", "rb");
    size_t got = ur ? fread(serial, 1, sizeof serial, ur) : 0;
    if (ur)
        fclose(ur);
    if (got != sizeof serial)
        goto fail;
    serial[0] &= 0x7f;   /* a positive serial number */
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    const char *cn = n_names ? names[0] : host[0] ? host : "localhost";
    X509_NAME *subj = X509_get_subject_name(x);
    X509V3_CTX v3;
    if (!bn || !X509_set_version(x, 2) || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ||
        !X509_gmtime_adj(X509_getm_notBefore(x), -300) ||
        !X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400) || !X509_set_pubkey(x, key) ||
        !X509_NAME_add_entry_by_txt(subj, "O", MBSTRING_UTF8, (const unsigned char *)"ember", -1, -1, 0) ||
        !X509_NAME_add_entry_by_txt(subj, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) ||
        !X509_set_issuer_name(x, subj)) {
        BN_free(bn);
        goto fail;
    }
    BN_free(bn);
    X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
    const char *exts[][2] = { { "subjectAltName", san },
                              { "basicConstraints", "critical,CA:FALSE" },
                              { "keyUsage", "critical,digitalSignature" },
                              { "extendedKeyUsage", "serverAuth" },
                              { "subjectKeyIdentifier", "hash" } };
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        if (!(ext = X509V3_EXT_conf(NULL, &v3, exts[i][0], exts[i][1])) || !X509_add_ext(x, ext, -1))
            goto fail;
        X509_EXTENSION_free(ext);
        ext = NULL;
    }
    if (!X509_sign(x, key, EVP_sha256()))
        goto fail;
    if ((status = write_pem(key_path, 0600, key, NULL)) || (status = write_pem(cert_path, 0644, NULL, x)))
        goto done;
    printf("%s\n%s\n", cert_path, key_path);
    fprintf(stderr, "tls-selfsigned: a certificate for %s, valid %ld days, and its key (mode 0600). Serve with "
            "`ember serve --tls-cert %s --tls-key %s`; browsers warn until it is trusted (docs/SECURITY.md).\n",
            san, days, cert_path, key_path);
    status = 0;
    goto done;
fail:
    status = em_cli_fail(1, "tls-selfsigned: OpenSSL could not make the key or the certificate");
done:
    X509_EXTENSION_free(ext);
    X509_free(x);
    EVP_PKEY_free(key);
    return status;
}
