/*
 * stop_signals.c
 *		SIGTERM/SIGINT through a signalfd (stop_signals.h).
 */
#include "payflow/stop_signals.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

int
pf_stop_signals_block(void)
{
	struct sigaction sa;
	sigset_t	set;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

int
pf_stop_signals_take(int fd)
{
	struct signalfd_siginfo si;

	while (fd >= 0 && read(fd, &si, sizeof(si)) == (ssize_t) sizeof(si))
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
			return (int) si.ssi_signo;
	return 0;
}

int
pf_stop_signals_wait(int fd, int timeout_ms)
{
	struct pollfd p = {fd, POLLIN, 0};

	if (fd < 0)
		return 0;
	if (poll(&p, 1, timeout_ms) <= 0)
		return 0;
	return pf_stop_signals_take(fd);
}

bool
pf_stop_signals_pending(int fd)
{
	struct pollfd p = {fd, POLLIN, 0};

	return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}
