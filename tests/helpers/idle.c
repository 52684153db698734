/* Test helper: a process whose /proc/PID/cmdline is exactly the argv it was given, and that then
 * waits. Environment switches (read once, then removed so children do not inherit them):
 *   HELPER_CHILD_TITLES  comma list; one forked child per item, which rewrites its argv to the item
 *                        like setproctitle (`VLLM::Worker_TP0`), or keeps the parent's argv for `=`.
 *                        The first child also forks a grandchild with the same title.
 *   HELPER_OUTLIVE       if set, those children outlive this process (orphans; by default they
 *                        die with it).
 *   HELPER_REAP          if set, this process reaps each child as soon as it ends (as a server
 *                        that waits for its workers does): no zombie is left to show its status.
 *   HELPER_SPAWN         argvs separated by \x1e, arguments by \x1f: one child per argv that execs
 *                        this helper with that argv (a supervisor starting engines).
 *   HELPER_SPAWN_ENV     NAME=VALUE set in those children's environment only.
 *   HELPER_LISTEN        if set, listen on TCP and print the port: on `IPV4:PORT` when it says so,
 *                        else on 127.0.0.1 on an ephemeral port.
 *   HELPER_ANSWER        with HELPER_LISTEN: answer every HTTP request on it with 200 and this
 *                        JSON body, one connection at a time (a server that is up).
 *   HELPER_EXIT_ON_USR2  a number: on SIGUSR2 this process exits with that status (an engine
 *                        that fails and exits 1).
 *   HELPER_REWRITE       argvs separated by \x1e, arguments by \x1f: on each SIGUSR1 the next one
 *                        overwrites this process's argv in place, as setproctitle does (the same
 *                        memory, NUL padded, cut to its size; comm and the argv range unchanged).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void idle(void) {
    for (;;) pause();
}

/* Overwrites the argv area (argv[0] up to the NUL ending the last argument) with the arguments
 * of `spec` (separated by \x1f), each NUL terminated, the rest zeroed. */
static void overwrite_argv(int argc, char **argv, const char *spec) {
    char *at = argv[0];
    char *end = argv[argc - 1] + strlen(argv[argc - 1]) + 1;
    memset(at, 0, (size_t)(end - at));
    for (const char *p = spec; p && at < end;) {
        const char *sep = strchr(p, '\x1f');
        size_t len = sep ? (size_t)(sep - p) : strlen(p);
        if (len >= (size_t)(end - at)) len = (size_t)(end - at) - 1;
        memcpy(at, p, len);
        at += len + 1;
        p = sep ? sep + 1 : NULL;
    }
}

static void retitle(int argc, char **argv, const char *title) {
    overwrite_argv(argc, argv, title);
    prctl(PR_SET_NAME, title, 0, 0, 0);
}

static int exit_status;

static void exit_on_signal(int sig) {
    (void)sig;
    _exit(exit_status);
}

static volatile sig_atomic_t rewrite_asked;

static void ask_rewrite(int sig) {
    (void)sig;
    rewrite_asked = 1;
}

/* One rewrite per SIGUSR1. The signal is blocked except inside sigsuspend, so none is lost
 * between two waits. */
static void rewrite_on_signal(int argc, char **argv, char *rewrites) {
    sigset_t usr1, others;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &others);
    struct sigaction action = {0};
    action.sa_handler = ask_rewrite;
    sigaction(SIGUSR1, &action, NULL);
    for (char *save = NULL, *r = strtok_r(rewrites, "\x1e", &save); r; r = strtok_r(NULL, "\x1e", &save)) {
        while (!rewrite_asked) sigsuspend(&others);
        rewrite_asked = 0;
        overwrite_argv(argc, argv, r);
    }
    sigprocmask(SIG_SETMASK, &others, NULL);
}

static void reap_children(int sig) {
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

/* From now on this process reaps its children as they end (its children do not: the handler is
 * reset in each child before it does anything else). */
static void reap_on_exit(void) {
    struct sigaction action = {0};
    action.sa_handler = reap_children;
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&action.sa_mask);
    sigaction(SIGCHLD, &action, NULL);
}

static char *spawn_env;

static void spawn_exec(char *spec) {
    char *args[256];
    int n = 0;
    for (char *p = spec; n < 255;) {
        args[n++] = p;
        char *sep = strchr(p, '\x1f');
        if (!sep) break;
        *sep = '\0';
        p = sep + 1;
    }
    args[n] = NULL;
    if (fork() == 0) {
        if (spawn_env) putenv(spawn_env);
        execv("/proc/self/exe", args);
        _exit(127);
    }
}

/* Answers each request (read up to the end of its headers) with 200 and `body`, then closes. */
static void serve_answer(int fd, const char *body) {
    char head[256];
    int head_len = snprintf(head, sizeof head,
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                            strlen(body));
    for (;;) {
        int client = accept(fd, NULL, NULL);
        if (client < 0) continue;
        char request[8192];
        size_t got = 0;
        while (got < sizeof request - 1) {
            ssize_t n = read(client, request + got, sizeof request - 1 - got);
            if (n <= 0) break;
            got += (size_t)n;
            request[got] = '\0';
            if (strstr(request, "\r\n\r\n")) break;
        }
        if (write(client, head, (size_t)head_len) < 0 || write(client, body, strlen(body)) < 0) {
            /* the client went away: nothing to do */
        }
        close(client);
    }
}

int main(int argc, char **argv) {
    signal(SIGCHLD, SIG_DFL);
    char *titles = getenv("HELPER_CHILD_TITLES");
    char *spawn = getenv("HELPER_SPAWN");
    char *listen_on = getenv("HELPER_LISTEN");
    char *rewrites = getenv("HELPER_REWRITE");
    int outlive = getenv("HELPER_OUTLIVE") != NULL;
    int reap = getenv("HELPER_REAP") != NULL;
    char *answer = getenv("HELPER_ANSWER");
    char *exit_on_usr2 = getenv("HELPER_EXIT_ON_USR2");
    if (exit_on_usr2) {
        exit_status = atoi(exit_on_usr2);
        signal(SIGUSR2, exit_on_signal);
    }
    spawn_env = getenv("HELPER_SPAWN_ENV");
    spawn_env = spawn_env ? strdup(spawn_env) : NULL;
    unsetenv("HELPER_SPAWN_ENV");
    answer = answer ? strdup(answer) : NULL;
    titles = titles ? strdup(titles) : NULL;
    spawn = spawn ? strdup(spawn) : NULL;
    rewrites = rewrites ? strdup(rewrites) : NULL;
    listen_on = listen_on ? strdup(listen_on) : NULL;
    unsetenv("HELPER_CHILD_TITLES");
    unsetenv("HELPER_SPAWN");
    unsetenv("HELPER_LISTEN");
    unsetenv("HELPER_REWRITE");
    unsetenv("HELPER_OUTLIVE");
    unsetenv("HELPER_REAP");
    unsetenv("HELPER_ANSWER");
    unsetenv("HELPER_EXIT_ON_USR2");
    int listening = -1;
    if (listen_on) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in addr = {0};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        char *colon = strrchr(listen_on, ':');
        if (colon) {
            *colon = '\0';
            if (inet_pton(AF_INET, listen_on, &addr.sin_addr) != 1) return 2;
            addr.sin_port = htons((unsigned short)atoi(colon + 1));
        }
        socklen_t len = sizeof addr;
        if (fd < 0 || bind(fd, (struct sockaddr *)&addr, len) || listen(fd, 4) ||
            getsockname(fd, (struct sockaddr *)&addr, &len))
            return 2;
        printf("%d\n", ntohs(addr.sin_port));
        fflush(stdout);
        listening = fd;
    }
    if (answer && listening >= 0) serve_answer(listening, answer);
    if (reap) reap_on_exit();
    if (titles) {
        int first = 1;
        for (char *save = NULL, *t = strtok_r(titles, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (fork() == 0) {
                signal(SIGCHLD, SIG_DFL);
                if (!outlive) prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (strcmp(t, "=") != 0) retitle(argc, argv, t);
                if (first && fork() == 0) {
                    if (!outlive) prctl(PR_SET_PDEATHSIG, SIGKILL);
                }
                idle();
            }
            first = 0;
        }
    }
    if (spawn) {
        for (char *save = NULL, *s = strtok_r(spawn, "\x1e", &save); s; s = strtok_r(NULL, "\x1e", &save))
            spawn_exec(s);
    }
    if (rewrites) rewrite_on_signal(argc, argv, rewrites);
    idle();
    return 0;
}
