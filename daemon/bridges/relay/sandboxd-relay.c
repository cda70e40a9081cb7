/*
 * sandboxd-relay: the one process of sandboxd's helper containers (docs/engines.md, "Docker Desktop"). Static,
 * no libc look-ups, nothing taken from any image.
 *
 *   sandboxd-relay serve UPSTREAM LISTEN MAX [RATE [MODE]]
 *
 * An agent relay. As an engine's hub it runs as root (gid 0), so it alone may connect to the
 * built-in agent socket (root:root 0660), and serves a 0666 socket in a volume only the sessions'
 * relays mount, at most MAX (the bound toward the agent across sessions) at once. As a session's
 * relay it runs as the session's uid:gid and serves a 0600 socket in a volume only that session
 * mounts (read-only), at most MAX at once and RATE new connections a second, piping each to the
 * hub. Prints "sandboxd-relay ready" once LISTEN accepts and one connection to UPSTREAM succeeded
 * (else it says why on stderr and exits 1); each connection gets a child that pipes it to a fresh
 * connection to UPSTREAM; a connection past a bound is closed at once, never forked for, and
 * counted. At most once a second, when they changed, it prints "sandboxd-relay status open=N
 * refused=N rebound=N" on stdout. Every second it checks that LISTEN is still the socket it bound;
 * when it is not (moved, removed or replaced), it binds it again, says so on stderr and counts it.
 * SIGTERM removes LISTEN and exits. RATE 0 (the default) is no rate bound; MODE is the socket's
 * (600, the default, or 666).
 *
 *   sandboxd-relay identities SOCKET
 *
 * The probe of a built-in socket: asks the agent at SOCKET for its identities (what `ssh-add -l`
 * asks) and prints "key <hex of the key blob>" for each, then "identities <count>". Exits 2 when
 * nothing answers on SOCKET, 3 on an answer that is not an agent's, 4 when it takes over 5 seconds.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_INTERVAL_MS 1000
#define IDENTITIES_TIMEOUT_S 5
#define MAX_ANSWER_BYTES (256 * 1024)
#define SSH2_AGENTC_REQUEST_IDENTITIES 11
#define SSH2_AGENT_IDENTITIES_ANSWER 12

static const char *listen_path;
static volatile sig_atomic_t live;
static unsigned long refused, rebound;

static void on_term(int sig) {
  (void)sig;
  unlink(listen_path);
  _exit(0);
}

/* Reaps every child that ended, so `live` counts the connections still served. */
static void on_child(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) live--;
  errno = saved;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char message[] = "sandboxd-relay: the agent did not answer in time\n";
  if (write(2, message, sizeof message - 1) < 0) _exit(4);
  _exit(4);
}

static int unix_address(const char *path, struct sockaddr_un *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (strlen(path) >= sizeof addr->sun_path) return -1;
  strcpy(addr->sun_path, path);
  return 0;
}

static int connect_to(const char *path) {
  struct sockaddr_un addr;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (unix_address(path, &addr) != 0) {
    close(fd);
    errno = ENAMETOOLONG;
    return -1;
  }
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    int failed = errno;
    close(fd);
    errno = failed;
    return -1;
  }
  return fd;
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
  int upstream = connect_to(upstream_path);
  if (upstream < 0) {
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

static long long now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static long bounded(const char *text, long low, long high) {
  char *end;
  long value = strtol(text, &end, 10);
  return *text == '\0' || *end != '\0' || value < low || value > high ? -1 : value;
}

/* Binds LISTEN afresh (whatever is at the name goes first) and notes the inode it bound. */
static int bind_listen(struct sockaddr_un *addr, struct stat *bound) {
  unlink(listen_path);
  int server = socket(AF_UNIX, SOCK_STREAM, 0);
  if (server < 0 || bind(server, (struct sockaddr *)addr, sizeof *addr) != 0 || listen(server, 64) != 0 || lstat(listen_path, bound) != 0) {
    fprintf(stderr, "sandboxd-relay: listen %s: %s\n", listen_path, strerror(errno));
    return -1;
  }
  return server;
}

static int serve(const char *upstream_path, const char *max_text, const char *rate_text, const char *mode_text) {
  long max = bounded(max_text, 1, 4096);
  long rate = bounded(rate_text, 0, 100000);
  struct sockaddr_un addr;
  if (max < 0 || rate < 0 || (strcmp(mode_text, "600") != 0 && strcmp(mode_text, "666") != 0)) {
    fprintf(stderr, "sandboxd-relay: MAX must be 1..4096, RATE 0..100000, MODE 600 or 666: %s %s %s\n", max_text, rate_text, mode_text);
    return 2;
  }
  if (unix_address(listen_path, &addr) != 0) {
    fprintf(stderr, "sandboxd-relay: path too long: %s\n", listen_path);
    return 2;
  }
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  struct sigaction reap;
  memset(&reap, 0, sizeof reap);
  reap.sa_handler = on_child;
  reap.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &reap, NULL);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  umask(strcmp(mode_text, "666") == 0 ? 0111 : 0177);
  struct stat bound;
  int server = bind_listen(&addr, &bound);
  if (server < 0) return 1;
  /* Ready means able to serve: one empty connection to the agent (it harms none), closed at once. */
  int probe = connect_to(upstream_path);
  if (probe < 0) {
    fprintf(stderr, "sandboxd-relay: connect %s: %s\n", upstream_path, strerror(errno));
    unlink(listen_path);
    return 1;
  }
  close(probe);
  printf("sandboxd-relay ready\n");
  fflush(stdout);
  /* The rate bound: a token bucket of RATE tokens, one second's worth, refilled as time passes. */
  long long tokens_ms = rate * 1000, filled_at = now_ms(), said_at = 0;
  long said_live = -1;
  unsigned long said_refused = 0, said_rebound = 0;
  for (;;) {
    struct pollfd waiting = {server, POLLIN, 0};
    int ready = poll(&waiting, 1, CHECK_INTERVAL_MS);
    long long now = now_ms();
    struct stat seen;
    if (lstat(listen_path, &seen) != 0 || seen.st_dev != bound.st_dev || seen.st_ino != bound.st_ino) {
      close(server);
      server = bind_listen(&addr, &bound);
      if (server < 0) return 1;
      rebound++;
      fprintf(stderr, "sandboxd-relay: %s was not the socket it bound; bound it again\n", listen_path);
      continue;
    }
    if (now - said_at >= CHECK_INTERVAL_MS && (live != said_live || refused != said_refused || rebound != said_rebound)) {
      said_at = now;
      said_live = live;
      said_refused = refused;
      said_rebound = rebound;
      printf("sandboxd-relay status open=%ld refused=%lu rebound=%lu\n", said_live, said_refused, said_rebound);
      fflush(stdout);
    }
    if (ready <= 0) continue;
    int client = accept(server, NULL, NULL);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE || errno == EAGAIN) continue;
      fprintf(stderr, "sandboxd-relay: accept: %s\n", strerror(errno));
      return 1;
    }
    if (rate > 0) {
      tokens_ms += (now - filled_at) * rate;
      if (tokens_ms > rate * 1000) tokens_ms = rate * 1000;
      filled_at = now;
    }
    sigprocmask(SIG_BLOCK, &chld, NULL);
    if (live < max && (rate == 0 || tokens_ms >= 1000)) {
      if (rate > 0) tokens_ms -= 1000;
      pid_t child = fork();
      if (child == 0) {
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        sigprocmask(SIG_UNBLOCK, &chld, NULL);
        close(server);
        serve_connection(client, upstream_path);
      }
      if (child > 0) live++;
    } else {
      refused++;
    }
    sigprocmask(SIG_UNBLOCK, &chld, NULL);
    close(client);
  }
}

static int read_all(int fd, unsigned char *buffer, size_t length) {
  for (size_t got = 0; got < length;) {
    ssize_t n = read(fd, buffer + got, length - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static uint32_t be32(const unsigned char *at) {
  return ((uint32_t)at[0] << 24) | ((uint32_t)at[1] << 16) | ((uint32_t)at[2] << 8) | (uint32_t)at[3];
}

static int not_an_agent(const char *path) {
  fprintf(stderr, "sandboxd-relay: %s did not answer as an ssh agent\n", path);
  return 3;
}

static int identities(const char *path) {
  signal(SIGALRM, on_alarm);
  signal(SIGPIPE, SIG_IGN);
  alarm(IDENTITIES_TIMEOUT_S);
  int agent = connect_to(path);
  if (agent < 0) {
    fprintf(stderr, "sandboxd-relay: connect %s: %s\n", path, strerror(errno));
    return 2;
  }
  const unsigned char request[] = {0, 0, 0, 1, SSH2_AGENTC_REQUEST_IDENTITIES};
  if (write(agent, request, sizeof request) != (ssize_t)sizeof request) {
    fprintf(stderr, "sandboxd-relay: write %s: %s\n", path, strerror(errno));
    return 2;
  }
  unsigned char header[4];
  if (read_all(agent, header, sizeof header) != 0) return not_an_agent(path);
  uint32_t length = be32(header);
  if (length < 5 || length > MAX_ANSWER_BYTES) return not_an_agent(path);
  unsigned char *body = malloc(length);
  if (body == NULL || read_all(agent, body, length) != 0 || body[0] != SSH2_AGENT_IDENTITIES_ANSWER) return not_an_agent(path);
  uint32_t count = be32(body + 1);
  size_t at = 5;
  for (uint32_t index = 0; index < count; index++) {
    if (length - at < 4) return not_an_agent(path);
    uint32_t blob = be32(body + at);
    at += 4;
    if (length - at < blob) return not_an_agent(path);
    printf("key ");
    for (uint32_t byte = 0; byte < blob; byte++) printf("%02x", body[at + byte]);
    printf("\n");
    at += blob;
    if (length - at < 4) return not_an_agent(path);
    uint32_t comment = be32(body + at);
    at += 4;
    if (length - at < comment) return not_an_agent(path);
    at += comment;
  }
  printf("identities %u\n", count);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 5 && argc <= 7 && strcmp(argv[1], "serve") == 0) {
    listen_path = argv[3];
    return serve(argv[2], argv[4], argc >= 6 ? argv[5] : "0", argc == 7 ? argv[6] : "600");
  }
  if (argc == 3 && strcmp(argv[1], "identities") == 0) return identities(argv[2]);
  fprintf(stderr, "usage: sandboxd-relay serve UPSTREAM LISTEN MAX [RATE [MODE]] | sandboxd-relay identities SOCKET\n");
  return 2;
}
