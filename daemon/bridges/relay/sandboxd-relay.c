/*
 * sandboxd-relay: the one process of sandboxd's shared agent relay container (README, "Docker
 * Desktop"). It runs inside the engine's VM as the session's uid:gid with gid 0 as a supplementary
 * group, so it alone may connect to the built-in agent socket (root:root 0660), and it serves a
 * 0600 socket owned by that uid in a volume the session containers mount. Static, no libc
 * look-ups, nothing taken from any image.
 *
 *   sandboxd-relay UPSTREAM LISTEN
 *
 * Prints "sandboxd-relay ready" once LISTEN accepts; each connection gets a child that pipes it to
 * a fresh connection to UPSTREAM. SIGTERM removes LISTEN and exits.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char *listen_path;

static void on_term(int sig) {
  (void)sig;
  unlink(listen_path);
  _exit(0);
}

static int unix_address(const char *path, struct sockaddr_un *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr->sun_path) return -1;
  strcpy(addr->sun_path, path);
  return 0;
}

/* Copies what is readable on `from` to `to`; returns 0 at end of stream or on error. */
static int shuttle(int from, int to) {
  char buffer[16384];
  ssize_t got = read(from, buffer, sizeof buffer);
  if (got <= 0) return 0;
  for (ssize_t sent = 0; sent < got;) {
    ssize_t wrote = write(to, buffer + sent, (size_t)(got - sent));
    if (wrote <= 0) return 0;
    sent += wrote;
  }
  return 1;
}

static void serve_connection(int client, const char *upstream_path) {
  struct sockaddr_un addr;
  int upstream = socket(AF_UNIX, SOCK_STREAM, 0);
  if (upstream < 0 || unix_address(upstream_path, &addr) != 0 || connect(upstream, (struct sockaddr *)&addr, sizeof addr) != 0) {
    fprintf(stderr, "sandboxd-relay: connect %s: %s\n", upstream_path, strerror(errno));
    _exit(1);
  }
  struct pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !shuttle(client, upstream)) break;
    if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) && !shuttle(upstream, client)) break;
  }
  _exit(0);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: sandboxd-relay UPSTREAM LISTEN\n");
    return 2;
  }
  const char *upstream_path = argv[1];
  listen_path = argv[2];
  struct sockaddr_un addr;
  if (unix_address(listen_path, &addr) != 0) {
    fprintf(stderr, "sandboxd-relay: path too long: %s\n", listen_path);
    return 2;
  }
  /* Children are never waited for; the kernel reaps them (this is PID 1 of its container). */
  signal(SIGCHLD, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  umask(0177);
  unlink(listen_path);
  int server = socket(AF_UNIX, SOCK_STREAM, 0);
  if (server < 0 || bind(server, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(server, 64) != 0) {
    fprintf(stderr, "sandboxd-relay: listen %s: %s\n", listen_path, strerror(errno));
    return 1;
  }
  printf("sandboxd-relay ready\n");
  fflush(stdout);
  for (;;) {
    int client = accept(server, NULL, NULL);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
      fprintf(stderr, "sandboxd-relay: accept: %s\n", strerror(errno));
      return 1;
    }
    pid_t child = fork();
    if (child == 0) {
      close(server);
      serve_connection(client, upstream_path);
    }
    close(client);
  }
}
