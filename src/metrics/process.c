/* SPDX-License-Identifier: Apache-2.0 */
/*
 * process.c: the process metrics every Prometheus client library exports,
 * under their standard names (process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds, process_start_time_seconds), read from
 * /proc/self at render time, and roomd_build_info{version,commit}.
 */
#include "metrics/metrics.h"

#include "core/version.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Fields 14, 15 (utime, stime), 22 (starttime, ticks after boot), 23 (vsize)
 * and 24 (rss, pages) of /proc/self/stat; 0 on failure. */
struct proc_stat {
    unsigned long long utime, stime, starttime, vsize;
    long long rss;
};

static int
read_stat(struct proc_stat *ps)
{
    char buf[2048];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n;

    memset(ps, 0, sizeof(*ps));
    if (f == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* the command name (field 2) may hold spaces: parse after its ')' */
    const char *p = strrchr(buf, ')');
    if (p == NULL)
        return -1;
    return sscanf(p + 2,
                  "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                  "%*d %llu %llu %lld",
                  &ps->utime, &ps->stime, &ps->starttime, &ps->vsize, &ps->rss) == 5
               ? 0
               : -1;
}

/* The boot time (btime of /proc/stat), seconds since the epoch; 0 if unknown. */
static long long
boot_time(void)
{
    char line[256];
    long long bt = 0;
    FILE *f = fopen("/proc/stat", "r");

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "btime %lld", &bt) == 1)
            break;
    fclose(f);
    return bt;
}

static long
open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

void
metrics_render_process(struct metrics_text *t)
{
    struct proc_stat ps;
    double tick = (double)sysconf(_SC_CLK_TCK);
    struct rlimit rl;
    char labels[128];

    snprintf(labels, sizeof(labels), "version=\"%s\",commit=\"%s\"", roomd_version, roomd_commit);
    metrics_family(t, "roomd_build_info", "gauge", "The running build: version and commit.");
    metrics_count(t, "roomd_build_info", labels, 1);
    if (read_stat(&ps) == 0 && tick > 0) {
        metrics_family(t, "process_cpu_seconds_total", "counter",
                       "Total user and system CPU time spent in seconds.");
        metrics_value(t, "process_cpu_seconds_total", "", (double)(ps.utime + ps.stime) / tick);
        metrics_family(t, "process_resident_memory_bytes", "gauge",
                       "Resident memory size in bytes.");
        metrics_count(t, "process_resident_memory_bytes", "",
                      (uint64_t)ps.rss * (uint64_t)sysconf(_SC_PAGESIZE));
        metrics_family(t, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        metrics_count(t, "process_virtual_memory_bytes", "", ps.vsize);
        long long bt = boot_time();
        if (bt > 0) {
            metrics_family(t, "process_start_time_seconds", "gauge",
                           "Start time of the process since unix epoch in seconds.");
            metrics_value(t, "process_start_time_seconds", "",
                          (double)bt + (double)ps.starttime / tick);
        }
    }
    long fds = open_fds();
    if (fds >= 0) {
        metrics_family(t, "process_open_fds", "gauge", "Number of open file descriptors.");
        metrics_count(t, "process_open_fds", "", (uint64_t)fds);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        metrics_family(t, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        metrics_count(t, "process_max_fds", "", (uint64_t)rl.rlim_cur);
    }
}
