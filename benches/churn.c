/* Churn generator for benches/soak.py: starts short-lived processes with chosen argv at a steady
 * average rate and records, for every child, who it was and when it lived.
 *
 *   churn ARGV_FILE RECORD_FILE RATE SEED MIN_MS MAX_MS
 *
 * ARGV_FILE has one argv per line, arguments separated by \x1f; the first field is a label that
 * is not passed on ("E" engine-like, "O" ordinary) and the child picks a label with probability
 * 1/2, then a line of that label uniformly. Arrivals are Poisson at RATE per second (a busy host
 * does not fork on a metronome). Each child execs this binary again with the chosen argv, so
 * /proc/PID/cmdline is exactly that argv, and lives a uniform random time in [MIN_MS, MAX_MS]
 * before exiting by itself (CHURN_LIFE_NS in its environment says how long; it is removed at
 * once). Because children end themselves, nothing outlives us by more than MAX_MS even if we
 * are killed.
 *
 * RECORD_FILE gets one line per reaped child:
 *   pid start_ticks line_index fork_ns exit_ns status
 * start_ticks is field 22 of /proc/PID/stat, read right after fork: until we reap the child its
 * pid cannot be reused, so that read always names our child. fork_ns and exit_ns are
 * CLOCK_MONOTONIC (the clock Python's time.monotonic() reads); exit_ns is when we reaped it,
 * which is within microseconds of its exit because we sleep in sigtimedwait on SIGCHLD.
 * status is the waitpid status. A last line "# spawned N fork_failures F late L" follows.
 *
 * SIGTERM, SIGINT or SIGHUP (and the death of our parent, via PR_SET_PDEATHSIG) stop the churn:
 * every child still alive is killed, reaped and recorded. We only ever signal our own unreaped
 * children.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LIFE_ENV "CHURN_LIFE_NS"

typedef struct {
    char engine;  /* 'E' or 'O' */
    char **argv;  /* NULL-terminated */
} Line;

typedef struct {
    pid_t pid;
    long long ticks;
    int line;
    int64_t fork_ns;
} Child;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The child side: we were exec'd with the argv under test; just live, then exit. */
static int live(const char *life) {
    long long ns = atoll(life);
    unsetenv(LIFE_ENV);
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return 0;
}

/* splitmix64: a tiny seeded generator, so a run can be repeated with the same seed. */
static uint64_t rng_state;
static uint64_t next_random(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double uniform(void) { return (double)(next_random() >> 11) / 9007199254740992.0; }

static Line *load_lines(const char *path, int *count) {
    FILE *file = fopen(path, "r");
    if (!file) {
        perror(path);
        exit(2);
    }
    Line *lines = NULL;
    int n = 0;
    char *text = NULL;
    size_t size = 0;
    ssize_t len;
    while ((len = getline(&text, &size, file)) > 0) {
        if (text[len - 1] == '\n') text[--len] = '\0';
        if (len < 3 || (text[0] != 'E' && text[0] != 'O') || text[1] != '\x1f') continue;
        char *copy = strdup(text + 2);
        int args = 1;
        for (char *p = copy; *p; p++) args += *p == '\x1f';
        char **argv = calloc((size_t)args + 1, sizeof *argv);
        int i = 0;
        for (char *save = NULL, *a = strtok_r(copy, "\x1f", &save); a; a = strtok_r(NULL, "\x1f", &save))
            argv[i++] = a;
        lines = realloc(lines, (size_t)(n + 1) * sizeof *lines);
        lines[n++] = (Line){text[0], argv};
    }
    free(text);
    fclose(file);
    *count = n;
    return lines;
}

/* Field 22 of /proc/PID/stat (start time in clock ticks), or -1. The command name (field 2)
 * may hold spaces and parentheses, so fields are counted from the last ')'. */
static long long start_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len <= 0) return -1;
    buf[len] = '\0';
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    p++;
    /* p is at the space before field 3; each step moves to the space before the next field. */
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p) return -1;
    }
    return atoll(p + 1);
}

static Child *children;
static int live_count, live_room;
static FILE *records;

static void record(pid_t pid, int status) {
    int64_t exit_ns = now_ns();
    for (int i = 0; i < live_count; i++) {
        if (children[i].pid != pid) continue;
        Child c = children[i];
        fprintf(records, "%d %lld %d %lld %lld %d\n", (int)c.pid, c.ticks, c.line, (long long)c.fork_ns,
                (long long)exit_ns, status);
        children[i] = children[--live_count];
        return;
    }
}

static void reap_all(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) record(pid, status);
}

int main(int argc, char **argv) {
    const char *life = getenv(LIFE_ENV);
    if (life) return live(life);
    if (argc != 7) {
        fprintf(stderr, "usage: %s ARGV_FILE RECORD_FILE RATE SEED MIN_MS MAX_MS\n", argv[0]);
        return 2;
    }
    int count;
    Line *lines = load_lines(argv[1], &count);
    double rate = atof(argv[3]);
    rng_state = strtoull(argv[4], NULL, 10);
    int64_t min_ns = atoll(argv[5]) * 1000000LL, max_ns = atoll(argv[6]) * 1000000LL;
    int engines = 0;
    for (int i = 0; i < count; i++) engines += lines[i].engine == 'E';
    if (rate <= 0 || engines == 0 || engines == count || max_ns < min_ns) {
        fprintf(stderr, "churn: need RATE > 0, both E and O lines, MIN_MS <= MAX_MS\n");
        return 2;
    }
    records = fopen(argv[2], "w");
    if (!records) {
        perror(argv[2]);
        return 2;
    }
    /* Children exec this very file (not /proc/self/exe), so their comm is "churn", not "exe". */
    char self[4096];
    ssize_t self_len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (self_len <= 0) return 2;
    self[self_len] = '\0';

    /* All signals we react to are taken synchronously in sigtimedwait: no handler races. */
    sigset_t wanted, previous;
    sigemptyset(&wanted);
    sigaddset(&wanted, SIGCHLD);
    sigaddset(&wanted, SIGTERM);
    sigaddset(&wanted, SIGINT);
    sigaddset(&wanted, SIGHUP);
    sigprocmask(SIG_BLOCK, &wanted, &previous);
    pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) return 1; /* parent already gone */

    long long spawned = 0, fork_failures = 0, late = 0;
    int64_t next_spawn = now_ns();
    int running = 1;
    while (running) {
        int64_t now = now_ns();
        if (now >= next_spawn) {
            if (now - next_spawn > 1000000000LL) {
                /* We fell a second behind (host overloaded): do not burst to catch up. */
                next_spawn = now;
                late++;
            }
            /* Exponential gap for Poisson arrivals; 1 - u is in (0, 1]. */
            next_spawn += (int64_t)(-log(1.0 - uniform()) / rate * 1e9);
            char want = uniform() < 0.5 ? 'E' : 'O';
            int of_kind = want == 'E' ? engines : count - engines;
            int pick = (int)(uniform() * of_kind);
            int index = 0;
            for (int i = 0; i < count; i++) {
                if (lines[i].engine != want) continue;
                if (pick-- == 0) {
                    index = i;
                    break;
                }
            }
            long long life_ns = min_ns + (long long)(uniform() * (double)(max_ns - min_ns));
            int64_t fork_ns = now_ns();
            pid_t pid = fork();
            if (pid == 0) {
                sigprocmask(SIG_SETMASK, &previous, NULL);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                char value[32];
                snprintf(value, sizeof value, "%lld", life_ns);
                setenv(LIFE_ENV, value, 1);
                execv(self, lines[index].argv);
                _exit(127);
            }
            if (pid < 0) {
                fork_failures++;
            } else {
                if (live_count == live_room) {
                    live_room = live_room ? 2 * live_room : 256;
                    children = realloc(children, (size_t)live_room * sizeof *children);
                }
                children[live_count++] = (Child){pid, start_ticks(pid), index, fork_ns};
                spawned++;
            }
        }
        int64_t wait = next_spawn - now_ns();
        if (wait < 0) wait = 0;
        struct timespec timeout = {(time_t)(wait / 1000000000LL), (long)(wait % 1000000000LL)};
        int sig = sigtimedwait(&wanted, NULL, &timeout);
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) running = 0;
        reap_all();
    }
    for (int i = 0; i < live_count; i++) kill(children[i].pid, SIGKILL);
    while (live_count > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) break;
        record(pid, status);
    }
    fprintf(records, "# spawned %lld fork_failures %lld late %lld\n", spawned, fork_failures, late);
    return fclose(records) == 0 ? 0 : 1;
}
