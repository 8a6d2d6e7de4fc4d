#define _GNU_SOURCE
#include "test_daemon.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Waits for the child to exit, at most `seconds`; 1 if it did. */
static int reap(pid_t pid, double seconds) {
  double deadline = now_s() + seconds;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return 1;
    if (now_s() >= deadline) return 0;
    /* A poll interval, not a synchronisation: the exit is the condition. */
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
}

int test_daemon_start(test_daemon* d, const char* kvpoold_path, const char* pools_json) {
  static int counter = 0;
  memset(d, 0, sizeof(*d));
  snprintf(d->dir, sizeof(d->dir), "/tmp/kvpool-c-XXXXXX");
  if (!mkdtemp(d->dir)) {
    perror("mkdtemp");
    return -1;
  }
  snprintf(d->instance, sizeof(d->instance), "c%d-%d", (int)getpid(), ++counter);
  char config[512], notify[512];
  snprintf(config, sizeof(config), "%s/kvpoold.json", d->dir);
  snprintf(notify, sizeof(notify), "%s/notify", d->dir);
  FILE* f = fopen(config, "w");
  if (!f) {
    perror("config");
    return -1;
  }
  fprintf(f,
          "{\"instance\": \"%s\", \"runtime_dir\": \"%s\", \"max_clients\": 16, "
          "\"uid_share_percent\": 100, "
          "\"poll_us\": 20, \"log_level\": \"warn\", \"pools\": %s}\n",
          d->instance, d->dir, pools_json);
  fclose(f);

  int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  if (strlen(notify) >= sizeof(addr.sun_path)) {
    fprintf(stderr, "notify socket path too long: %s\n", notify);
    return -1;
  }
  memcpy(addr.sun_path, notify, strlen(notify) + 1);
  if (sock < 0 || bind(sock, (struct sockaddr*)&addr, sizeof(addr)) != 0) {
    perror("notify socket");
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return -1;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* no orphan if the test dies */
    if (getppid() != parent) _exit(127);
    setenv("NOTIFY_SOCKET", notify, 1);
    unsetenv("RUNTIME_DIRECTORY");
    unsetenv("WATCHDOG_USEC");
    execl(kvpoold_path, kvpoold_path, "--config", config, (char*)NULL);
    fprintf(stderr, "exec %s: %s\n", kvpoold_path, strerror(errno));
    _exit(127);
  }
  d->pid = pid;
  double deadline = now_s() + 10.0;
  int ready = 0;
  while (!ready) {
    double left = deadline - now_s();
    int st;
    if (left <= 0 || waitpid(pid, &st, WNOHANG) == pid) {
      fprintf(stderr, "kvpoold (%s) did not send READY=1 within 10 s\n", kvpoold_path);
      close(sock);
      return -1;
    }
    struct pollfd p = {sock, POLLIN, 0};
    if (poll(&p, 1, left > 0.1 ? 100 : (int)(left * 1000) + 1) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(sock, buf, sizeof(buf) - 1, 0);
    if (n <= 0) continue;
    buf[n] = '\0';
    for (char* line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
      if (strcmp(line, "READY=1") == 0) ready = 1;
  }
  close(sock);
  unlink(notify);
  return 0;
}

void test_daemon_kill(test_daemon* d) {
  if (d->pid > 0) {
    kill(d->pid, SIGKILL);
    reap(d->pid, 30.0);
    d->pid = 0;
  }
}

void test_daemon_stop(test_daemon* d) {
  if (d->pid > 0) {
    kill(d->pid, SIGTERM);
    if (!reap(d->pid, 30.0)) test_daemon_kill(d);
    d->pid = 0;
  }
  char prefix[128];
  snprintf(prefix, sizeof(prefix), "kvpool.%s.", d->instance);
  DIR* shm = opendir("/dev/shm");
  if (shm) {
    struct dirent* e;
    while ((e = readdir(shm)) != NULL) {
      if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
        char path[512];
        snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
        unlink(path);
      }
    }
    closedir(shm);
  }
  DIR* dir = opendir(d->dir);
  if (dir) {
    struct dirent* e;
    while ((e = readdir(dir)) != NULL) {
      if (e->d_name[0] == '.') continue;
      char path[600];
      snprintf(path, sizeof(path), "%s/%s", d->dir, e->d_name);
      unlink(path);
    }
    closedir(dir);
  }
  rmdir(d->dir);
}
