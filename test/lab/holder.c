/*
 * What a hostile container does to its agent socket: opens N connections to SOCKET one after the
 * other and holds every one, asking each for the agent's identities (what `ssh-add -l` asks). Prints
 * "answered A closed C" once all were tried (A got an agent's answer within a second, C were
 * closed or never answered), then keeps them all open for SECONDS. Static, for any lab image.
 *
 *   holder SOCKET N SECONDS
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: holder SOCKET N SECONDS\n");
    return 2;
  }
  int total = atoi(argv[2]);
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
  static const unsigned char request[] = {0, 0, 0, 1, 11};
  int answered = 0, closed = 0;
  for (int i = 0; i < total; i++) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || write(fd, request, sizeof request) != (ssize_t)sizeof request) {
      closed++;
      continue;
    }
    struct pollfd wait = {fd, POLLIN, 0};
    char byte;
    if (poll(&wait, 1, 1000) == 1 && recv(fd, &byte, 1, MSG_PEEK) == 1) answered++;
    else closed++;
  }
  printf("answered %d closed %d\n", answered, closed);
  fflush(stdout);
  sleep((unsigned)atoi(argv[3]));
  return 0;
}
