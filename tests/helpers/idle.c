/* Test helper: a process whose /proc/PID/cmdline is exactly the argv it was given, and that then
 * waits. Environment switches (read once, then removed so children do not inherit them):
 *   HELPER_CHILD_TITLES  comma list; one forked child per item, which rewrites its argv to the item
 *                        like setproctitle (`VLLM::Worker_TP0`), or keeps the parent's argv for `=`.
 *                        The first child also forks a grandchild with the same title.
 *   HELPER_SPAWN         argvs separated by \x1e, arguments by \x1f: one child per argv that execs
 *                        this helper with that argv (a supervisor starting engines).
 *   HELPER_LISTEN        if set, listen on 127.0.0.1 on an ephemeral TCP port and print it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

static void idle(void) {
    for (;;) pause();
}

static void retitle(int argc, char **argv, const char *title) {
    char *start = argv[0];
    char *end = argv[argc - 1] + strlen(argv[argc - 1]);
    size_t room = (size_t)(end - start);
    memset(start, 0, room);
    strncpy(start, title, room);
    prctl(PR_SET_NAME, title, 0, 0, 0);
}

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
        execv("/proc/self/exe", args);
        _exit(127);
    }
}

int main(int argc, char **argv) {
    signal(SIGCHLD, SIG_DFL);
    char *titles = getenv("HELPER_CHILD_TITLES");
    char *spawn = getenv("HELPER_SPAWN");
    char *listen_on = getenv("HELPER_LISTEN");
    titles = titles ? strdup(titles) : NULL;
    spawn = spawn ? strdup(spawn) : NULL;
    unsetenv("HELPER_CHILD_TITLES");
    unsetenv("HELPER_SPAWN");
    unsetenv("HELPER_LISTEN");
    if (listen_on) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in addr = {0};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        if (fd < 0 || bind(fd, (struct sockaddr *)&addr, len) || listen(fd, 4) ||
            getsockname(fd, (struct sockaddr *)&addr, &len))
            return 2;
        printf("%d\n", ntohs(addr.sin_port));
        fflush(stdout);
    }
    if (titles) {
        int first = 1;
        for (char *save = NULL, *t = strtok_r(titles, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (fork() == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (strcmp(t, "=") != 0) retitle(argc, argv, t);
                if (first && fork() == 0) {
                    prctl(PR_SET_PDEATHSIG, SIGKILL);
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
    idle();
    return 0;
}
