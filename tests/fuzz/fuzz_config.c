/* fuzz_config.c — the configuration file of `ember serve --config FILE`
 * (INI: sections, keys, values of every kind, comments, continuation and
 * odd bytes): written to a memory file and read by em_config_load as serve
 * reads it, with a flag beside it; an accepted file's values stay within
 * their keys' ranges, and it prints back whole (--print-config's path). A
 * bad file is a refusal (exit status 2) with its line named. */
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "firmware/config.h"
#include "tests/fuzz/fuzz.h"

static const char usage[] = "usage: fuzz_config\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("ember.conf", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *argv[] = { "serve", "--config", path, "--port", "0", NULL };
    em_config *c = NULL;
    int print = 0;
    int rc = em_config_load(5, argv, usage, &c, &print);
    if (rc == 0) {
        FUZZ_ASSERT(c);
        long port = em_config_int(c, EM_CFG_PORT);
        FUZZ_ASSERT(port == 0);   /* the flag wins over the file */
        long par = em_config_int(c, EM_CFG_PARALLEL);
        FUZZ_ASSERT(par >= 0 && par <= 1024);
        FUZZ_ASSERT(em_config_str(c, EM_CFG_HOST) != NULL);
        fflush(stdout);   /* printed back whole, into /dev/null for the while */
        int saved = dup(1), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (saved >= 0 && null >= 0 && dup2(null, 1) == 1) {
            em_config_print(c);
            fflush(stdout);
            dup2(saved, 1);
        }
        if (null >= 0)
            close(null);
        if (saved >= 0)
            close(saved);
    } else {
        FUZZ_ASSERT(!c && rc == 2);
    }
    em_config_free(c);
    close(fd);
    return 0;
}
