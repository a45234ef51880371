/* The pod sandbox ("pause") process, as Kubernetes' build/pause/linux/pause.c:
 * sleeps until SIGINT/SIGTERM, reaps the zombies it inherits as PID 1.
 * Built statically by deploy/node-image/build and shipped in an OCI archive
 * that metalherd-images-import.service imports into containerd. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void sigdown(int signo) {
  psignal(signo, "Shutting down, got signal");
  exit(0);
}

static void sigreap(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0)
    ;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    printf("pause (metalherd node image)\n");
    return 0;
  }
  if (getpid() != 1)
    fprintf(stderr, "Warning: pause should be the first process\n");

  struct sigaction down = {.sa_handler = sigdown};
  if (sigaction(SIGINT, &down, NULL) < 0 || sigaction(SIGTERM, &down, NULL) < 0)
    return 1;
  struct sigaction reap = {.sa_handler = sigreap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGCHLD, &reap, NULL) < 0)
    return 2;

  for (;;)
    pause();
  fprintf(stderr, "Error: infinite loop terminated\n");
  return 42;
}
